package runner

import (
	"testing"

	"github.com/ptah-run/ptah/internal/fingerprint"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// spec.privileges moves the policy fingerprint only when Managed: a spec
// that leaves it out, or says Ignored, hashes as before the field existed;
// and planning asks the catalog for the grants only when Managed.
func TestPrivilegesPolicyFingerprintAndRequest(t *testing.T) {
	spec := api.PtahSchemaSpec{Schemas: []string{"public"}, Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}
	before := fingerprint.New("ptah.run/policy/v1").
		String("apply", "OnApproval").Bool("allowDestructive", false).String("lockTimeout", "5s").
		Strings("schemas", []string{"public"}).Bool("online", true).Sum()
	ignored, managed := spec, spec
	ignored.Privileges, managed.Privileges = api.PrivilegesIgnored, api.PrivilegesManaged
	if got := PolicyFingerprint(spec); got != before {
		t.Errorf("unset privileges: fingerprint %s, want the one before the field existed, %s", got, before)
	}
	if got := PolicyFingerprint(ignored); got != before {
		t.Errorf("privileges Ignored: fingerprint %s, want %s", got, before)
	}
	if PolicyFingerprint(managed) == before {
		t.Error("privileges Managed does not move the policy fingerprint")
	}
	for _, tt := range []struct {
		spec api.PtahSchemaSpec
		want bool
	}{{spec, false}, {ignored, false}, {managed, true}} {
		res := Resource{Schema: &api.PtahSchema{Spec: tt.spec}}
		if got := SchemaPlanRequest(res, "", 0).Privileges; got != tt.want {
			t.Errorf("privileges %q: PlanRequest.Privileges = %v, want %v", tt.spec.Privileges, got, tt.want)
		}
	}
}
