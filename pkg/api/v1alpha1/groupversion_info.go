package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every type in this package.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

var (
	// SchemeBuilder registers this package's types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&PtahSchema{}, &PtahSchemaList{},
		&PtahSchemaPlan{}, &PtahSchemaPlanList{},
		&PtahSchemaApproval{}, &PtahSchemaApprovalList{},
		&PtahMigration{}, &PtahMigrationList{},
		&PtahRealm{}, &PtahRealmList{},
		&PtahMigrationPlan{}, &PtahMigrationPlanList{},
		&PtahMigrationApproval{}, &PtahMigrationApprovalList{},
		&PtahMigrationRunAcknowledgment{}, &PtahMigrationRunAcknowledgmentList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
