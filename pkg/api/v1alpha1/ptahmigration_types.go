package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// KindPtahMigration is the kind of a versioned-migration resource.
const KindPtahMigration = "PtahMigration"

// PtahMigration runs a versioned sequence of hand-written SQL files against
// a PostgreSQL database, recording each in a history table, and refuses to
// guess when a run's outcome is unknown.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pmig,categories=ptah
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.status.plan.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PtahMigrationSpec `json:"spec"`
	// Status is written by ptah alone (see PtahSchema.Status).
	// +optional
	Status PtahMigrationStatus `json:"status,omitempty"`
}

// PtahMigrationList is a list of PtahMigration.
//
// +kubebuilder:object:root=true
type PtahMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahMigration `json:"items"`
}

// PtahMigrationSpec is the desired state of a PtahMigration. It has no list
// of schemas: a migration's files say what they touch.
type PtahMigrationSpec struct {
	// Target is the database to migrate.
	Target Target `json:"target"`
	// Source is where the versioned files live.
	Source MigrationSource `json:"source"`
	// Policy says when a plan may be applied.
	// +optional
	Policy MigrationPolicy `json:"policy,omitempty"`
	// Schedule is how often ptah serve looks again, and whether it may.
	Schedule `json:",inline"`
}

// MigrationLayout is how the files of a migration directory are named.
// +kubebuilder:validation:Enum=native;golang-migrate;flyway
type MigrationLayout string

const (
	// LayoutDetect (empty): the layout is read from the file names; a
	// directory whose names fit more than one layout is an error.
	LayoutDetect MigrationLayout = ""
	// LayoutNative: <version>_<name>.sql.
	LayoutNative MigrationLayout = "native"
	// LayoutGolangMigrate: <version>_<name>.up.sql; .down.sql files are
	// ignored.
	LayoutGolangMigrate MigrationLayout = "golang-migrate"
	// LayoutFlyway: V<version>__<name>.sql.
	LayoutFlyway MigrationLayout = "flyway"
)

// MigrationLayouts lists the layouts a document may name, in the order
// documentation shows them (LayoutDetect is their absence).
var MigrationLayouts = []MigrationLayout{LayoutNative, LayoutGolangMigrate, LayoutFlyway}

// MigrationSource is where a migration's versioned files live.
type MigrationSource struct {
	// Path is a directory of versioned .sql files, relative to the
	// document's file, run in version order.
	// +optional
	Path string `json:"path,omitempty"`
	// ConfigMap holds the versioned files as keys (ptah serve only).
	// +optional
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`
	// OCI is an artifact pinned by digest whose layers are the versioned
	// files, each named by its title (ptah serve only).
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
	// Layout is how the files are named; empty: detected.
	// +optional
	Layout MigrationLayout `json:"layout,omitempty"`
}

// MigrationPolicy governs applying a migration's plans. It is Policy
// without allowDestructive: ptah does not judge hand-written SQL, so
// ApplyAlways applies every plan without an approval.
type MigrationPolicy struct {
	// +kubebuilder:default=OnApproval
	// +optional
	Apply ApplyPolicy `json:"apply,omitempty"`
	// LockTimeout bounds how long each statement waits for a lock, as a Go
	// duration ("5s", "500ms").
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	LockTimeout string `json:"lockTimeout,omitempty"`
	// LockAttemptTimeout is how long one attempt to take a statement's
	// locks waits in PostgreSQL's lock queue before it steps out, letting
	// the sessions queued behind it through, and tries again (until
	// lockTimeout is spent). Default 100ms; as long as lockTimeout or
	// longer, one attempt.
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	LockAttemptTimeout string `json:"lockAttemptTimeout,omitempty"`
	// StatementTimeout bounds how long each statement may run, its lock
	// waits included (PostgreSQL's statement_timeout). Unset, none: the
	// run's deadline alone bounds a long CREATE INDEX CONCURRENTLY or
	// VALIDATE CONSTRAINT.
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	StatementTimeout string `json:"statementTimeout,omitempty"`
}
