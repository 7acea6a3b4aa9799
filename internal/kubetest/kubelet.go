package kubetest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Container is what the test kubelet hands Run: a Pod's only container,
// with what a real kubelet would have resolved. Paths are on this machine:
// each mount's files are materialized in a folder of their own, and the
// arguments that named a mount path name that folder instead.
type Container struct {
	Args []string
	// Env is the container's environment, Secret and ConfigMap keys
	// resolved.
	Env map[string]string
	// TerminationLog is where the process writes its termination message.
	TerminationLog string
}

// Kubelet is a test-only stand-in for the Job controller, the kubelet and
// the garbage collector, which envtest has none of: for each Job of a
// namespace it creates the Pod, runs the Pod's container with Run (a local
// process, or in-process code), and writes back the Pod's and the Job's
// status, termination message included, as Kubernetes 1.37 would; and it
// collects the Pods of deleted Jobs (see collect).
type Kubelet struct {
	Env *Env
	// Namespace is the namespace whose Jobs it runs ("": every namespace).
	Namespace string
	// Run runs a container and returns its exit code.
	Run func(ctx context.Context, c Container) int
	// Stall, when it returns true for a Job, leaves its Pod running for
	// ever (a Pod that hangs, or a node that stopped reporting).
	Stall func(job *batchv1.Job) bool
	// Parallel is how many Pods run at once (0 or 1: one at a time, as
	// the tests want; a node runs many).
	Parallel int

	mu   sync.Mutex
	seen map[string]bool
}

// Start runs the kubelet until the test ends.
func (k *Kubelet) Start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Serve(ctx, func(err error) { t.Errorf("test kubelet: %v", err) })
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// Serve runs the kubelet until ctx ends, reporting what it fails to do to
// failed, and returns once every container it started has returned.
func (k *Kubelet) Serve(ctx context.Context, failed func(error)) {
	k.mu.Lock()
	k.seen = map[string]bool{}
	k.mu.Unlock()
	slots := make(chan struct{}, max(k.Parallel, 1))
	var running sync.WaitGroup
	defer running.Wait()
	for sweep := 0; ctx.Err() == nil; sweep++ {
		if sweep%5 == 0 {
			if err := k.collect(ctx); err != nil && ctx.Err() == nil {
				failed(fmt.Errorf("collecting the Pods of deleted Jobs: %w", err))
			}
		}
		var jobs batchv1.JobList
		if err := k.Env.Client.List(ctx, &jobs, client.InNamespace(k.Namespace)); err == nil {
			for i := range jobs.Items {
				job := &jobs.Items[i]
				k.mu.Lock()
				seen := k.seen[string(job.UID)]
				k.seen[string(job.UID)] = true
				k.mu.Unlock()
				if seen || job.Status.CompletionTime != nil {
					continue
				}
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				running.Add(1)
				go func() {
					defer func() { <-slots; running.Done() }()
					if err := k.runJob(ctx, job); err != nil && ctx.Err() == nil {
						failed(fmt.Errorf("running the Pod of Job %s/%s: %w", job.Namespace, job.Name, err))
					}
				}()
				if k.Parallel <= 1 {
					running.Wait() // one Pod at a time, in the order listed
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *Kubelet) runJob(ctx context.Context, job *batchv1.Job) error {
	c := k.Env.Client
	start := metav1.Now()
	// The Pod carries its template's labels, and the Job's name, as the
	// Job controller's Pods do.
	labels := map[string]string{}
	for k, v := range job.Spec.Template.Labels {
		labels[k] = v
	}
	labels["batch.kubernetes.io/job-name"] = job.Name
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-pod", Namespace: job.Namespace, Labels: labels,
			Annotations:     job.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating its Pod: %w", err)
	}
	job.Status.StartTime, job.Status.Active = &start, 1
	if err := c.Status().Update(ctx, job); err != nil {
		return fmt.Errorf("marking it active: %w", err)
	}
	pod.Status.Phase, pod.Status.StartTime = corev1.PodRunning, &start
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("marking its Pod running: %w", err)
	}
	if k.Stall != nil && k.Stall(job) {
		return nil
	}
	container, cleanup, err := k.resolve(ctx, pod)
	if err != nil {
		return err
	}
	defer cleanup()
	code := k.Run(ctx, container)
	message, _ := os.ReadFile(container.TerminationLog)
	if len(message) > 4096 {
		message = message[:4096] // the kubelet's own limit
	}
	return k.finish(ctx, job, pod, code, string(message))
}

// resolve materializes the Pod's volumes and environment on this machine.
func (k *Kubelet) resolve(ctx context.Context, pod *corev1.Pod) (Container, func(), error) {
	dir, err := os.MkdirTemp("", "kubelet-")
	if err != nil {
		return Container{}, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	fail := func(err error) (Container, func(), error) { cleanup(); return Container{}, nil, err }
	spec := pod.Spec.Containers[0]
	out := Container{Env: map[string]string{}, TerminationLog: filepath.Join(dir, "termination-log")}
	volumes := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		host := filepath.Join(dir, "volume-"+v.Name)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return fail(err)
		}
		var maps []string
		var fields []corev1.DownwardAPIVolumeFile
		switch {
		case v.ConfigMap != nil:
			maps = []string{v.ConfigMap.Name}
		case v.DownwardAPI != nil:
			fields = v.DownwardAPI.Items
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					maps = append(maps, s.ConfigMap.Name)
				}
				if s.DownwardAPI != nil {
					fields = append(fields, s.DownwardAPI.Items...)
				}
			}
		}
		for _, f := range fields {
			value, err := fieldOf(pod, f)
			if err != nil {
				return fail(fmt.Errorf("volume %s: %w", v.Name, err))
			}
			if err := os.WriteFile(filepath.Join(host, f.Path), []byte(value), 0o444); err != nil {
				return fail(err)
			}
		}
		for _, name := range maps {
			var cm corev1.ConfigMap
			if err := k.Env.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &cm); err != nil {
				return fail(fmt.Errorf("volume %s: ConfigMap %s: %w", v.Name, name, err))
			}
			for key, b := range cm.BinaryData {
				if err := os.WriteFile(filepath.Join(host, key), b, 0o444); err != nil {
					return fail(err)
				}
			}
			for key, s := range cm.Data {
				if err := os.WriteFile(filepath.Join(host, key), []byte(s), 0o444); err != nil {
					return fail(err)
				}
			}
		}
		volumes[v.Name] = host
	}
	mounts := map[string]string{spec.TerminationMessagePath: out.TerminationLog}
	if a := pod.Spec.AutomountServiceAccountToken; a != nil && *a && pod.Spec.ServiceAccountName != "" {
		host := filepath.Join(dir, "serviceaccount")
		if err := k.mountToken(ctx, pod, host, out.Env); err != nil {
			return fail(err)
		}
		mounts[serviceAccountPath] = host
	}
	for _, m := range spec.VolumeMounts {
		mounts[m.MountPath] = volumes[m.Name]
	}
	for _, a := range spec.Args {
		for from, to := range mounts {
			if a == from || strings.HasPrefix(a, from+"/") {
				a = to + strings.TrimPrefix(a, from)
				break
			}
		}
		out.Args = append(out.Args, a)
	}
	for _, e := range spec.Env {
		switch {
		case e.ValueFrom == nil:
			out.Env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			var s corev1.Secret
			ref := e.ValueFrom.SecretKeyRef
			if err := k.Env.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}, &s); err != nil {
				return fail(fmt.Errorf("env %s: Secret %s: %w", e.Name, ref.Name, err))
			}
			out.Env[e.Name] = string(s.Data[ref.Key])
		}
	}
	return out, cleanup, nil
}

// fieldOf is what the downward API puts in file f of a Pod's volume: the
// Pod's name, namespace, UID, or one of its labels or annotations.
func fieldOf(pod *corev1.Pod, f corev1.DownwardAPIVolumeFile) (string, error) {
	if f.FieldRef == nil {
		return "", fmt.Errorf("file %s: only fieldRef is supported here", f.Path)
	}
	path := f.FieldRef.FieldPath
	key := func(prefix string) (string, bool) {
		if !strings.HasPrefix(path, prefix+"['") || !strings.HasSuffix(path, "']") {
			return "", false
		}
		return strings.TrimSuffix(strings.TrimPrefix(path, prefix+"['"), "']"), true
	}
	switch {
	case path == "metadata.name":
		return pod.Name, nil
	case path == "metadata.namespace":
		return pod.Namespace, nil
	case path == "metadata.uid":
		return string(pod.UID), nil
	}
	if k, ok := key("metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	if k, ok := key("metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	return "", fmt.Errorf("file %s: field %q is not one this test kubelet resolves", f.Path, path)
}

// collect does the garbage collector's part for Jobs and their Pods. A Job
// deleted with propagation Orphan (batch/v1's default) waits under the
// orphan finalizer: its Pods lose their owner reference, then it goes. A
// Job deleted in the background is gone at once: each Pod it owned goes
// too, once it has ended (a real collector deletes a running Pod, which
// stays until its container is stopped; here the container runs to its
// end, and the Pod goes then).
func (k *Kubelet) collect(ctx context.Context) error {
	c := k.Env.Client
	// Pods first: a Job listed after its Pod was is in the list unless it
	// is gone.
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(k.Namespace)); err != nil {
		return err
	}
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(k.Namespace)); err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if job.DeletionTimestamp == nil || !slices.Contains(job.Finalizers, metav1.FinalizerOrphanDependents) {
			live[job.UID] = true
			continue
		}
		for j := range pods.Items {
			pod := &pods.Items[j]
			owned := slices.DeleteFunc(slices.Clone(pod.OwnerReferences), func(r metav1.OwnerReference) bool { return r.UID == job.UID })
			if len(owned) == len(pod.OwnerReferences) {
				continue
			}
			pod.OwnerReferences = owned
			if err := c.Update(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("orphaning Pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
		}
		job.Finalizers = slices.DeleteFunc(job.Finalizers, func(f string) bool { return f == metav1.FinalizerOrphanDependents })
		if err := c.Update(ctx, job); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("finishing the orphaning deletion of Job %s/%s: %w", job.Namespace, job.Name, err)
		}
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		ref := metav1.GetControllerOf(pod)
		if ref == nil || ref.Kind != "Job" || live[ref.UID] || pod.DeletionTimestamp != nil ||
			pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			continue
		}
		if err := c.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("collecting Pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return nil
}

// End ends the Pod of a Job that Stall left running, with the exit code
// and termination message given, as a node that killed it would (and
// the Job controller after it).
func (k *Kubelet) End(ctx context.Context, jobName string, code int, message string) error {
	var job batchv1.Job
	if err := k.Env.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: jobName}, &job); err != nil {
		return err
	}
	var pod corev1.Pod
	if err := k.Env.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: jobName + "-pod"}, &pod); err != nil {
		return err
	}
	if pod.Status.StartTime == nil {
		return fmt.Errorf("the Pod of Job %s has not started yet", jobName)
	}
	return k.finish(ctx, &job, &pod, code, message)
}

// serviceAccountPath is where Kubernetes mounts a Pod's token.
const serviceAccountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// mountToken does what the kubelet does for a Pod that automounts its
// ServiceAccount's token: a bound token from the TokenRequest API, the
// cluster's CA certificate and the namespace in host, and the API
// server's address in the environment.
func (k *Kubelet) mountToken(ctx context.Context, pod *corev1.Pod, host string, env map[string]string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: pod.Spec.ServiceAccountName, Namespace: pod.Namespace}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	if err := k.Env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return fmt.Errorf("a token for ServiceAccount %s: %w", sa.Name, err)
	}
	u, err := url.Parse(k.Env.Config.Host)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(host, 0o755); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": k.Env.Config.CAData, "namespace": []byte(pod.Namespace)} {
		if err := os.WriteFile(filepath.Join(host, name), b, 0o444); err != nil {
			return err
		}
	}
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = u.Hostname(), u.Port()
	return nil
}

// finish records how the container ended, as the kubelet and the Job
// controller of Kubernetes 1.37 do: the Pod terminated with its message,
// then the Job's SuccessCriteriaMet or FailureTarget condition before
// Complete or Failed (the API server refuses the latter alone).
func (k *Kubelet) finish(ctx context.Context, job *batchv1.Job, pod *corev1.Pod, code int, message string) error {
	c := k.Env.Client
	now := metav1.Now()
	reason := "Completed"
	pod.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		reason, pod.Status.Phase = "Error", corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason,
			Message: message, StartedAt: *pod.Status.StartTime, FinishedAt: now}}}}
	if err := c.Status().Update(ctx, pod); apierrors.IsNotFound(err) {
		return nil // deleted meanwhile, its Job with it
	} else if err != nil {
		return fmt.Errorf("recording its Pod's end: %w", err)
	}
	var fresh batchv1.Job
	if err := c.Get(ctx, client.ObjectKeyFromObject(job), &fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted while it ran: its Pod is orphaned, as in a cluster
		}
		return err
	}
	cond := func(t batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: now, LastTransitionTime: now}
	}
	fresh.Status.Active = 0
	if code == 0 {
		fresh.Status.Succeeded = 1
		fresh.Status.CompletionTime = &now
		fresh.Status.Conditions = append(fresh.Status.Conditions, cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"),
			cond(batchv1.JobComplete, "CompletionsReached"))
	} else {
		fresh.Status.Failed = 1
		fresh.Status.Conditions = append(fresh.Status.Conditions, cond(batchv1.JobFailureTarget, "BackoffLimitExceeded"),
			cond(batchv1.JobFailed, "BackoffLimitExceeded"))
	}
	if err := c.Status().Update(ctx, &fresh); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recording its end: %w", err) // deleted meanwhile: nothing to record, as in a cluster
	}
	return nil
}
