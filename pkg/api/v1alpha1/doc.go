// Package v1alpha1 holds the ptah.run/v1alpha1 resource types. The same
// documents are read from ptah.yaml by the CLI and served as custom
// resources by `ptah serve`: the CRDs under deploy/ are generated from these
// types (make generate), and so is zz_generated.deepcopy.go.
//
// +kubebuilder:object:generate=true
// +groupName=ptah.run
package v1alpha1

const (
	// Group is the API group of every ptah resource.
	Group = "ptah.run"
	// Version is this package's API version.
	Version = "v1alpha1"
	// APIVersion is what a document's apiVersion field must say.
	APIVersion = Group + "/" + Version

	// ContractVersion is the version of the durable state this binary reads
	// and writes. Stored state with a newer contract version is refused
	// rather than misread (the fence of DESIGN.md section 4).
	//
	//   - 1: the first.
	//   - 2: a plan runs in the transactions its spec.phases list (cut to
	//     the target's spec.lockCapacity), which its fingerprint covers. A
	//     ptah of contract 1 would ignore them, take the plan for tampered,
	//     and run it in one transaction.
	//
	// A kind added to the API (the migration family) does not change it: a
	// ptah that predates a kind refuses its objects by kind. Nor does a field
	// added to a shared type for one family only, left out of the JSON of
	// the other family's objects, whose encodings and fingerprints stay as
	// they were. Where each kind carries it: Records.
	ContractVersion = 2
)
