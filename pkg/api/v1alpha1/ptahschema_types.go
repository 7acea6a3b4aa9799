package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// KindPtahSchema is the kind of a declared-schema resource.
const KindPtahSchema = "PtahSchema"

// PtahSchema converges a PostgreSQL database to a schema declared as a
// directory of SQL files.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pschema,categories=ptah
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.status.plan.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahSchema struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PtahSchemaSpec `json:"spec"`
	// Status is written by ptah alone: in a cluster by the manager, through
	// the status subresource; in local mode it is kept in the target's ptah
	// schema, and a status in ptah.yaml is refused.
	// +optional
	Status PtahSchemaStatus `json:"status,omitempty"`
}

// PtahSchemaList is a list of PtahSchema.
//
// +kubebuilder:object:root=true
type PtahSchemaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahSchema `json:"items"`
}

// PtahSchemaSpec is the desired state of a PtahSchema.
type PtahSchemaSpec struct {
	// Target is the database to converge.
	Target Target `json:"target"`
	// Source is where the declared SQL lives.
	Source Source `json:"source"`
	// Schemas are the schemas ptah manages; objects elsewhere are neither
	// read nor changed. The "ptah" schema holds ptah's own state and is
	// never managed.
	// +kubebuilder:default={public}
	// +kubebuilder:validation:MinItems=1
	// +optional
	Schemas []string `json:"schemas,omitempty"`
	// Policy says when a plan may be applied.
	// +optional
	Policy Policy `json:"policy,omitempty"`
	// Privileges says whether ptah manages the privileges on the managed
	// objects (GRANT and REVOKE on schemas, tables, views, columns,
	// sequences, functions and procedures): Managed plans them toward the
	// declared files' grants; Ignored (the default) neither reads nor
	// changes them. Roles are never created or dropped either way.
	// +optional
	Privileges PrivilegesMode `json:"privileges,omitempty"`
	// Schedule is how often ptah serve looks again, and whether it may.
	Schedule `json:",inline"`
}

// PrivilegesMode says whether ptah manages privileges (spec.privileges).
// +kubebuilder:validation:Enum=Ignored;Managed
type PrivilegesMode string

const (
	// PrivilegesIgnored: privileges are neither read nor planned.
	PrivilegesIgnored PrivilegesMode = "Ignored"
	// PrivilegesManaged: the grants on the managed objects are planned to
	// be the declared files' (see the README).
	PrivilegesManaged PrivilegesMode = "Managed"
)

// PrivilegesModes lists the valid modes, in the order documentation shows them.
var PrivilegesModes = []PrivilegesMode{PrivilegesIgnored, PrivilegesManaged}

// ManagesPrivileges says whether privileges are Managed. Empty is Ignored,
// as the API server defaults it: Default leaves the field empty, so that a
// spec written before the field existed is stored as it was.
func (s PtahSchemaSpec) ManagesPrivileges() bool { return s.Privileges == PrivilegesManaged }

// Schedule is what ptah serve reads of a resource's spec to know when to
// look again; local mode runs when it is asked to and ignores it.
type Schedule struct {
	// Interval is how often ptah serve observes the database again once
	// it is in sync (a Go duration, at least 30s).
	// +optional
	Interval string `json:"interval,omitempty"`
	// Suspend stops ptah serve from starting anything new for the
	// resource; a run already dispatched is still accounted for.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// EnginePostgres is the only engine so far.
const EnginePostgres = "postgres"

// Target is a database and how to reach it.
type Target struct {
	// Engine is the database engine.
	// +kubebuilder:validation:Enum=postgres
	// +kubebuilder:default=postgres
	// +optional
	Engine string `json:"engine,omitempty"`
	// URL is a literal connection URL. Accepted, but it puts credentials in
	// the file: prefer URLFrom.
	// +optional
	URL string `json:"url,omitempty"`
	// URLFrom reads the connection URL from the environment or a file.
	// +optional
	URLFrom *URLSource `json:"urlFrom,omitempty"`
	// CoordinationKey names the database for coordination purposes: resources
	// with the same key never run against it at the same time. Empty: derived
	// from the target's identity.
	// +optional
	CoordinationKey string `json:"coordinationKey,omitempty"`
	// SharedRealm declares that this resource knowingly shares its database
	// with other resources of the same coordination key.
	// +optional
	SharedRealm bool `json:"sharedRealm,omitempty"`
}

// URLSource names exactly one place holding a connection URL.
type URLSource struct {
	// Env is the name of an environment variable holding the URL.
	// +optional
	Env string `json:"env,omitempty"`
	// File is a file holding the URL (surrounding whitespace is ignored),
	// relative to the document's file.
	// +optional
	File string `json:"file,omitempty"`
	// SecretKeyRef is a key of a Secret in the resource's namespace (ptah
	// serve only): the Job that reads the database gets it as an
	// environment variable, and the manager never reads it.
	// +optional
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`
}

// SecretKeyRef names one key of a Secret in the resource's namespace.
type SecretKeyRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ConfigMapSource names a ConfigMap in the resource's namespace whose keys
// are the source's file names (ptah serve only).
type ConfigMapSource struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Source is where the declared schema lives: exactly one of its fields.
type Source struct {
	// Path is a directory of *.sql files, loaded in lexical order, relative
	// to the document's file.
	// +optional
	Path string `json:"path,omitempty"`
	// ConfigMap holds the *.sql files as keys, loaded in lexical order
	// (ptah serve only).
	// +optional
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`
	// OCI is an artifact pinned by digest whose layers are the *.sql
	// files, each named by its title annotation (ptah serve only).
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
}

// OCISource is an OCI artifact pinned by its manifest's digest: the digest
// is the whole version, and a plan binds it (the artifact digest covers
// the reference and every file).
type OCISource struct {
	// Ref is oci://REGISTRY/REPOSITORY@sha256:DIGEST; a tag is refused.
	// +kubebuilder:validation:Pattern=`^oci://[^@]+@sha256:[0-9a-f]{64}$`
	Ref string `json:"ref"`
	// PullSecret names a kubernetes.io/dockerconfigjson Secret of the
	// resource's namespace with the registry's credentials; the reading
	// Job gets it, the manager never reads it.
	// +optional
	PullSecret string `json:"pullSecret,omitempty"`
}

// ApplyPolicy says when a plan may be applied.
// +kubebuilder:validation:Enum=Never;OnApproval;Always
type ApplyPolicy string

const (
	// ApplyNever: plans are computed and shown, never applied.
	ApplyNever ApplyPolicy = "Never"
	// ApplyOnApproval: a plan is applied once an approval names it.
	ApplyOnApproval ApplyPolicy = "OnApproval"
	// ApplyAlways: plans are applied without approval, except destructive
	// ones, which still need one.
	ApplyAlways ApplyPolicy = "Always"
)

// ApplyPolicies lists the valid policies, in the order documentation shows them.
var ApplyPolicies = []ApplyPolicy{ApplyNever, ApplyOnApproval, ApplyAlways}

// Policy governs applying plans.
type Policy struct {
	// +kubebuilder:default=OnApproval
	// +optional
	Apply ApplyPolicy `json:"apply,omitempty"`
	// AllowDestructive lets plans that delete data be applied. Without it a
	// destructive plan is refused.
	// +optional
	AllowDestructive bool `json:"allowDestructive,omitempty"`
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
	// Online plans keep the application reading and writing while they
	// change tables that hold rows: an index on an existing table is
	// built, replaced and dropped CONCURRENTLY, each such statement run
	// on its own, outside a transaction, so a plan is no longer
	// all-or-nothing. Unset means true. false plans every change in one
	// transaction (cut only where PostgreSQL or the lock table requires),
	// all or nothing, holding its locks until it commits.
	// +optional
	Online *bool `json:"online,omitempty"`
}

// IsOnline says whether plans are online (Policy.Online, true when unset).
func (p Policy) IsOnline() bool { return p.Online == nil || *p.Online }
