package controller

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// How a plan reaches the Pod that runs it. A termination message holds at
// most 4 KiB and an API object about 1.5 MiB, while a plan can be
// megabytes, and SQL must not pass through Pod logs or arguments. A plan
// of at most InlinePlanBytes (every reading's request, most applies')
// travels in the Job itself: an annotation of its Pod template, which the
// downward API mounts read-only as the plan's one part, so that a Job is
// one object to create and one to delete. A larger plan is split into
// immutable ConfigMaps of at most ChunkBytes each, mounted read-only into
// the Pod. Either way the manager passes the digest of the whole; ptah
// exec reassembles the parts in order and refuses anything that does not
// hash to it. A plan over MaxPlanBytes is refused before any Job exists.
const (
	// InlinePlanBytes is the largest plan carried in the Job: half of the
	// 256 KiB the API server allows a Pod's annotations all together.
	InlinePlanBytes = 128 << 10
	// AnnotationPlan holds an inline plan on the Job's Pod template.
	AnnotationPlan = "ptah.run/plan"
	ChunkBytes     = 1 << 20 // 1 MiB of plan per ConfigMap, under the API's object limit
	MaxChunks      = 16
	MaxPlanBytes   = ChunkBytes * MaxChunks // 16 MiB
	// MaxPlanObjectBytes bounds the spec of a plan object in a cluster,
	// published whole (approvals bind its UID): one API object, under the
	// API server's limit of about 1.5 MiB with its metadata. It is the
	// largest plan ptah serve runs; local mode has no such bound.
	MaxPlanObjectBytes = ChunkBytes
	// PlanMountPath is where the Pod sees the parts, one file per part.
	PlanMountPath = "/var/run/ptah/plan"
	// TerminationMessagePath is where ptah exec writes its result.
	TerminationMessagePath = "/dev/termination-log"
	// EnvDatabaseURL holds the target's URL in the Pod, from the Secret key
	// the resource names; it is never an argument.
	EnvDatabaseURL = "PTAH_DATABASE_URL"
	// EnvRegistryConfig holds a reading's registry credentials (a
	// dockerconfigjson), from the resource's pull Secret.
	EnvRegistryConfig = "PTAH_REGISTRY_CONFIG"
	// LabelOperation marks the Job and the ConfigMaps of one operation.
	LabelOperation = "ptah.run/operation"
	// LabelResourceUID marks the Jobs of one resource.
	LabelResourceUID = "ptah.run/resource-uid"
	// SourceMountPath is where a reading's Pod sees the declared files.
	SourceMountPath = "/var/run/ptah/source"
	// APICredentialsPath is where a Pod sees its ServiceAccount token.
	APICredentialsPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// PlannerServiceAccount is the account of the Jobs that read: it may
	// create plan objects in its namespace and nothing else (deploy/rbac).
	PlannerServiceAccount = "ptah-planner"
)

// Errors of the plan transport.
var (
	ErrPlanTooLarge  = fmt.Errorf("the plan is larger than %d bytes, the most a Job carries", MaxPlanBytes)
	ErrPlanCorrupted = errors.New("the plan's parts do not hash to its digest")
	// ErrPlanObjectTooLarge: a reading's plan exceeds MaxPlanObjectBytes.
	ErrPlanObjectTooLarge = fmt.Errorf("a plan in a cluster is at most %d bytes (one API object)", MaxPlanObjectBytes)
)

// PlanParts is a plan split for transport.
type PlanParts struct {
	// Digest is "sha256:<hex>" of the whole plan.
	Digest string
	Parts  [][]byte
}

// SplitPlan splits a plan's JSON into parts of at most ChunkBytes.
func SplitPlan(plan []byte) (PlanParts, error) {
	if len(plan) > MaxPlanBytes {
		return PlanParts{}, fmt.Errorf("%w (it is %d bytes)", ErrPlanTooLarge, len(plan))
	}
	sum := sha256.Sum256(plan)
	p := PlanParts{Digest: "sha256:" + hex.EncodeToString(sum[:])}
	for len(plan) > ChunkBytes {
		p.Parts = append(p.Parts, plan[:ChunkBytes])
		plan = plan[ChunkBytes:]
	}
	return PlanParts{Digest: p.Digest, Parts: append(p.Parts, plan)}, nil
}

// Inline: the plan travels in its Job (InlinePlanBytes), not in
// ConfigMaps of its own.
func (p PlanParts) Inline() bool { return len(p.Parts) == 1 && len(p.Parts[0]) <= InlinePlanBytes }

// partFile names part i in the Pod: names that sort in order.
func partFile(i int) string { return fmt.Sprintf("part-%02d", i) }

// AssemblePlan reads the parts from fsys (the mounted folder) in order and
// returns the plan, refusing parts that do not hash to digest: a part
// missing, added, reordered or changed.
func AssemblePlan(fsys fs.FS, digest string) ([]byte, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading the plan's parts: %w", err)
	}
	var buf bytes.Buffer
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "part-") || e.IsDir() {
			continue // the volume's own bookkeeping (..data, symlinks)
		}
		if e.Name() != partFile(n) {
			return nil, fmt.Errorf("%w: part %s where %s belongs", ErrPlanCorrupted, e.Name(), partFile(n))
		}
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading the plan's part %s: %w", e.Name(), err)
		}
		if buf.Len()+len(b) > MaxPlanBytes {
			return nil, ErrPlanTooLarge
		}
		buf.Write(b)
		n++
	}
	sum := sha256.Sum256(buf.Bytes())
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		return nil, fmt.Errorf("%w: %d parts hash to %s, not %s", ErrPlanCorrupted, n, got, digest)
	}
	return buf.Bytes(), nil
}

// ExecRequest is one run the manager dispatches as a Job.
type ExecRequest struct {
	Namespace string
	// Resource is the PtahSchema or PtahMigration the run belongs to; the
	// Job is owned by it.
	ResourceKind, ResourceName, ResourceUID string
	OperationID                             string
	// Image runs ptah exec.
	Image string
	// URLSecret and URLKey name the Secret key holding the database URL.
	URLSecret, URLKey string
	// Deadline is the run's absolute deadline, which ptah exec enforces on
	// the database server's clock; the Job's activeDeadlineSeconds is a
	// backstop derived from it.
	Deadline time.Time
	Now      time.Time
	Plan     PlanParts
	// Task is the Payload's task, for the Job's labels.
	Task string
	// Source is the ConfigMap of declared files a reading mounts.
	Source string
	// RegistrySecret is the dockerconfigjson Secret whose credentials a
	// reading of an OCI source pulls with.
	RegistrySecret string
	// ServiceAccount, when set, runs the Pod as that account with its
	// token mounted (a reading that hands statements back); empty: no
	// token at all.
	ServiceAccount string
}

// JobName is the Job of one operation of one resource: the same request
// always names the same Job, so a manager that restarts mid-dispatch finds
// the Job it created instead of creating a second one.
func JobName(resourceUID, operationID string) string {
	sum := sha256.Sum256([]byte(resourceUID + "\x00" + operationID))
	return "ptah-run-" + hex.EncodeToString(sum[:])[:20]
}

// PartsName is the ConfigMap holding part i of the operation's plan.
func PartsName(resourceUID, operationID string, i int) string {
	return JobName(resourceUID, operationID) + "-" + strconv.Itoa(i)
}

// PlanConfigMaps are the immutable ConfigMaps carrying the plan's parts:
// none for a plan its Job carries (PlanParts.Inline).
func PlanConfigMaps(r ExecRequest) []*corev1.ConfigMap {
	if r.Plan.Inline() {
		return nil
	}
	out := make([]*corev1.ConfigMap, len(r.Plan.Parts))
	for i, part := range r.Plan.Parts {
		immutable := true
		out[i] = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: PartsName(r.ResourceUID, r.OperationID, i), Namespace: r.Namespace,
				Labels:      map[string]string{LabelOperation: r.OperationID},
				Annotations: map[string]string{"ptah.run/plan-digest": r.Plan.Digest}},
			Immutable:  &immutable,
			BinaryData: map[string][]byte{partFile(i): part},
		}
	}
	return out
}

// BuildJob is the Job that runs one operation: exactly once (no retries,
// no restarts), as a non-root user with a read-only root filesystem and no
// ServiceAccount token, the database URL in its environment from the
// Secret, the plan mounted from its own annotation or its ConfigMaps.
func BuildJob(r ExecRequest) *batchv1.Job {
	name := JobName(r.ResourceUID, r.OperationID)
	noRetry := int32(0)
	f, t := false, true
	uid := int64(65532)
	// The backstop stops the Pod a minute after the deadline ptah exec
	// itself enforces, never before it.
	active := int64(r.Deadline.Sub(r.Now)/time.Second) + 60
	var sources []corev1.VolumeProjection
	var annotations map[string]string
	if r.Plan.Inline() {
		annotations = map[string]string{AnnotationPlan: string(r.Plan.Parts[0])}
		sources = []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
			Path: partFile(0), FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationPlan + "']"}}}}}}
	}
	for i := 0; i < len(r.Plan.Parts) && !r.Plan.Inline(); i++ {
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: PartsName(r.ResourceUID, r.OperationID, i)}}})
	}
	task := r.Task
	if task == "" {
		task = TaskApply
	}
	labels := map[string]string{LabelOperation: r.OperationID, LabelResourceUID: r.ResourceUID,
		"app.kubernetes.io/name": "ptah", "app.kubernetes.io/component": task}
	args := []string{"exec", "--operation", r.OperationID, "--plan-digest", r.Plan.Digest,
		"--plan-dir", PlanMountPath, "--deadline", r.Deadline.UTC().Format(time.RFC3339Nano)}
	mounts := []corev1.VolumeMount{{Name: "plan", MountPath: PlanMountPath, ReadOnly: true}}
	volumes := []corev1.Volume{{Name: "plan", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}}
	if r.Source != "" {
		args = append(args, "--source-dir", SourceMountPath)
		mounts = append(mounts, corev1.VolumeMount{Name: "source", MountPath: SourceMountPath, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "source", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: r.Source}}}})
	}
	env := []corev1.EnvVar{{Name: EnvDatabaseURL, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: r.URLSecret}, Key: r.URLKey}}}}
	if r.RegistrySecret != "" {
		env = append(env, corev1.EnvVar{Name: EnvRegistryConfig, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: r.RegistrySecret}, Key: corev1.DockerConfigJsonKey}}})
	}
	automount := &f
	if r.ServiceAccount != "" {
		automount = &t
		args = append(args, "--api-credentials", APICredentialsPath)
	}
	controller := true
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "ptah.run/v1alpha1", Kind: r.ResourceKind,
				Name: r.ResourceName, UID: types.UID(r.ResourceUID), Controller: &controller}}},
		Spec: batchv1.JobSpec{
			BackoffLimit:          &noRetry,
			ActiveDeadlineSeconds: &active,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           r.ServiceAccount,
					AutomountServiceAccountToken: automount,
					EnableServiceLinks:           &f,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &t, RunAsUser: &uid, RunAsGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:                     "run",
						Image:                    r.Image,
						Args:                     args,
						Env:                      env,
						VolumeMounts:             mounts,
						TerminationMessagePath:   TerminationMessagePath,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
					Volumes: volumes,
				},
			},
		},
	}
}
