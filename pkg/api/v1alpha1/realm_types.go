package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// KindPtahRealm is the kind of a cluster-scoped realm object.
const KindPtahRealm = "PtahRealm"

// PtahRealm admits several namespaces to one coordination key, in a
// cluster. ptah serve scopes a resource's spec.target.coordinationKey to
// its namespace, so that a tenant cannot hold up another by naming the
// same key; an administrator who wants resources of several namespaces
// coordinated as one (one writer at a time across their databases)
// writes a PtahRealm naming the key and the namespaces. The same database
// conflicts wherever it is claimed, realm or not. Local mode ignores it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=prealm,categories=ptah
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Key",type=string,JSONPath=`.spec.coordinationKey`
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahRealm struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PtahRealmSpec `json:"spec"`
}

// PtahRealmSpec names a coordination key and the namespaces it joins.
type PtahRealmSpec struct {
	// CoordinationKey is the spec.target.coordinationKey it admits.
	// +kubebuilder:validation:MinLength=1
	CoordinationKey string `json:"coordinationKey"`
	// Namespaces are the namespaces whose resources share the key.
	// +kubebuilder:validation:MinItems=1
	Namespaces []string `json:"namespaces"`
}

// PtahRealmList is a list of PtahRealm.
//
// +kubebuilder:object:root=true
type PtahRealmList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahRealm `json:"items"`
}
