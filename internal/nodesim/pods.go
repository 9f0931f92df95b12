package nodesim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpupod"
)

// podState is what the node remembers of an admitted pod.
type podState struct {
	uid        types.UID
	namespace  string
	name       string
	allocation *gpupod.PodAllocation
	// terminal is set once the pod ended here; its devices are free.
	terminal bool
	timer    *time.Timer
	// run holds the processes of a pod whose containers run for real
	// (Config.Containers).
	run *runPod
}

// startPods watches the pods bound to the node and starts the worker that
// admits, runs and ends them.
func (s *Simulator) startPods(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.cfg.NodeName).String()
		}))
	informer := factory.Core().V1().Pods()
	s.podLister = informer.Lister()
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodesim-" + s.cfg.NodeName})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	s.order = newAdmissionOrder()
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.order.arrive(obj); enqueue(obj) },
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) { s.order.leave(obj); enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("watching the pods of node %s: %w", s.cfg.NodeName, err)
	}
	factory.Start(s.ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("listing the pods of node %s (%v): %w", s.cfg.NodeName, typ, ctx.Err())
		}
	}
	s.wg.Go(func() {
		<-s.ctx.Done()
		s.queue.ShutDown()
		factory.Shutdown()
	})
	for range podWorkers {
		s.wg.Go(s.runPodWorker)
	}
	return nil
}

// podWorkers is how many pods are synced at once. Admission itself (device
// choice, Allocate) is serialized by admitMu and ordered by arrival
// (admissionOrder), as the kubelet admits one pod at a time as they
// arrive; status writes run in parallel.
const podWorkers = 4

func (s *Simulator) runPodWorker() {
	for {
		key, quit := s.queue.Get()
		if quit {
			return
		}
		err := s.syncPod(s.ctx, key)
		switch {
		case err == nil:
			s.queue.Forget(key)
		case s.ctx.Err() != nil:
		default:
			s.log.Warn("syncing pod; retrying", "pod", key, "err", err)
			s.queue.AddRateLimited(key)
		}
		s.queue.Done(key)
	}
}

// syncPod brings one pod one step closer to what the kubelet would make of
// it.
func (s *Simulator) syncPod(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := s.podLister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		s.forget(key, "")
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	st := s.pods[key]
	s.mu.Unlock()
	if st != nil && st.uid != pod.UID {
		// A new pod of the same name: the old one is gone.
		s.forget(key, st.uid)
		st = nil
	}

	if st != nil || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		s.order.done(pod.UID) // admitted already, or never to be
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return s.finishDeletion(ctx, key, pod)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		s.endPod(key)
		return nil
	case st == nil:
		return s.startPod(ctx, key, pod)
	case st.terminal:
		// Ended here, but writing that to the pod's status failed.
		return s.completePod(ctx, key, pod)
	case st.run != nil:
		// Its containers' supervisors write its status.
		return nil
	case pod.Status.Phase == corev1.PodPending:
		// Admitted, but reporting it Running failed: try again.
		if err := s.updateStatus(ctx, pod, s.runningStatus); err != nil {
			return err
		}
		s.scheduleEnd(key, pod)
		return nil
	}
	end, ok, err := endTime(pod)
	if err != nil || !ok || time.Now().Before(end) {
		return nil
	}
	return s.completePod(ctx, key, pod)
}

// startPod admits a new pod (or re-adopts one this node admitted before a
// restart) and reports it Running.
func (s *Simulator) startPod(ctx context.Context, key string, pod *corev1.Pod) error {
	alloc, err := gpupod.ReadAllocation(pod)
	if err != nil {
		s.log.Warn("ignoring an unreadable allocation annotation", "pod", key, "err", err)
		alloc = nil
	}
	if alloc != nil && alloc.Node == s.cfg.NodeName {
		s.order.done(pod.UID)
		for _, c := range alloc.Containers {
			for r, ids := range c.Devices {
				s.reserve(key, r, ids)
			}
		}
	} else {
		// One pod after the other, in the order they arrived.
		s.order.wait(ctx, pod.UID)
		s.admitMu.Lock()
		alloc, err = s.admit(ctx, key, pod)
		s.admitMu.Unlock()
		s.order.done(pod.UID)
		var refused *admissionError
		if errors.As(err, &refused) {
			return s.refusePod(ctx, key, pod, refused)
		}
		if err != nil {
			s.release(key)
			return err
		}
		patched, err := s.writeAllocation(ctx, pod, alloc)
		if err != nil {
			s.release(key)
			return err
		}
		// The patch answered the pod as it is now: write the status on
		// it without reading it again.
		pod = patched
	}
	// Claims are prepared after admission and before the containers
	// start, as the kubelet's DRA manager does; until they can be, the pod
	// stays Pending and is tried again.
	pod, err = s.prepareClaims(ctx, key, pod)
	if err != nil {
		var notReady *claimNotReadyError
		if errors.As(err, &notReady) {
			s.event(ctx, pod, "FailedPrepareDynamicResources", notReady.msg)
		}
		return err
	}
	st := &podState{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, allocation: alloc}
	if s.cfg.Containers.runnable(pod) {
		run, err := s.startRunPod(ctx, key, pod)
		var failed *podFailure
		if errors.As(err, &failed) {
			s.release(key)
			return s.refusePod(ctx, key, pod, &admissionError{Reason: failed.reason, Message: failed.message})
		}
		if err != nil {
			s.release(key)
			return err
		}
		st.run = run
		s.mu.Lock()
		s.pods[key] = st
		s.mu.Unlock()
		return nil
	}
	s.mu.Lock()
	s.pods[key] = st
	s.mu.Unlock()

	if pod.Status.Phase != corev1.PodRunning {
		if err := s.updateStatus(ctx, pod, s.runningStatus); err != nil {
			return err
		}
		s.log.Info("pod running", "pod", key, "devices", summarize(alloc))
	}
	s.scheduleEnd(key, pod)
	return nil
}

// scheduleEnd queues the pod again when its simulated duration ends.
func (s *Simulator) scheduleEnd(key string, pod *corev1.Pod) {
	end, ok, err := endTime(pod)
	if err != nil {
		s.log.Warn("ignoring the pod's simulated duration", "pod", key, "err", err)
		return
	}
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.pods[key]
	if st == nil || st.timer != nil {
		return
	}
	st.timer = time.AfterFunc(time.Until(end), func() { s.queue.Add(key) })
}

// endTime is when the pod's simulated duration ends, counted from its
// start (or from now when it has not started yet).
func endTime(pod *corev1.Pod) (time.Time, bool, error) {
	raw, ok := pod.Annotations[gpupod.DurationAnnotation]
	if !ok {
		return time.Time{}, false, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return time.Time{}, false, fmt.Errorf("annotation %s: %q is not a duration like 30s", gpupod.DurationAnnotation, raw)
	}
	start := time.Now()
	if pod.Status.StartTime != nil {
		start = pod.Status.StartTime.Time
	}
	return start.Add(d), true, nil
}

// completePod ends a pod whose duration is over: Succeeded, or Failed with
// the exit code of its annotation.
func (s *Simulator) completePod(ctx context.Context, key string, pod *corev1.Pod) error {
	code := int32(0)
	if raw, ok := pod.Annotations[gpupod.ExitCodeAnnotation]; ok {
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil {
			s.log.Warn("annotation is not an exit code; using 1", "pod", key, "annotation", gpupod.ExitCodeAnnotation, "value", raw)
			n = 1
		}
		code = int32(n)
	}
	// The containers have exited: their devices are free before anyone
	// can read that from the pod's status, as in the kubelet, whose
	// admission counts only the pods it still runs. Freed first, a
	// scheduler that sees the pod finished and binds another in its
	// place never finds the node still full.
	s.endPod(key)
	if err := s.updateStatus(ctx, pod, func(st *corev1.PodStatus, p *corev1.Pod) { terminatedStatus(st, p, code) }); err != nil {
		return err
	}
	s.log.Info("pod finished", "pod", key, "exitCode", code)
	return nil
}

// refusePod fails a pod the node cannot admit, as the kubelet does, and
// records a Warning event.
func (s *Simulator) refusePod(ctx context.Context, key string, pod *corev1.Pod, refused *admissionError) error {
	s.log.Warn("pod refused", "pod", key, "reason", refused.Reason, "message", refused.Message)
	err := s.updateStatus(ctx, pod, func(st *corev1.PodStatus, _ *corev1.Pod) {
		st.Phase = corev1.PodFailed
		st.Reason = refused.Reason
		st.Message = refused.Message
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pods[key] = &podState{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, terminal: true}
	s.mu.Unlock()
	s.event(ctx, pod, refused.Reason, refused.Message)
	return nil
}

// finishDeletion ends a pod being deleted gracefully: its devices are
// freed and, as the kubelet does once the containers are gone, the pod
// object is removed.
func (s *Simulator) finishDeletion(ctx context.Context, key string, pod *corev1.Pod) error {
	s.forget(key, pod.UID)
	err := s.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("removing deleted pod %s: %w", key, err)
	}
	return nil
}

// endPod frees an ended pod's devices and remembers it ended.
func (s *Simulator) endPod(key string) {
	s.mu.Lock()
	st := s.pods[key]
	if st != nil {
		st.terminal = true
		if st.timer != nil {
			st.timer.Stop()
		}
	}
	s.mu.Unlock()
	if s.release(key) {
		s.log.Info("devices freed", "pod", key)
	}
	s.releaseClaims(key)
}

// forget drops the node's record of the pod (of uid, or whatever pod has
// the key when uid is empty) and frees its devices.
func (s *Simulator) forget(key string, uid types.UID) {
	s.mu.Lock()
	st := s.pods[key]
	var run *runPod
	if st != nil && (uid == "" || st.uid == uid) {
		if st.timer != nil {
			st.timer.Stop()
		}
		run = st.run
		delete(s.pods, key)
	}
	s.mu.Unlock()
	if run != nil {
		run.stop()
		s.log.Info("pod's containers stopped", "pod", key)
	}
	if s.release(key) {
		s.log.Info("devices freed", "pod", key)
	}
	s.releaseClaims(key)
}

// writeAllocation records the allocation on the pod.
func (s *Simulator) writeAllocation(ctx context.Context, pod *corev1.Pod, alloc *gpupod.PodAllocation) (*corev1.Pod, error) {
	raw, err := gpupod.FormatAllocation(alloc)
	if err != nil {
		return nil, fmt.Errorf("recording the allocation of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{gpupod.AllocationAnnotation: raw},
		"uid":         pod.UID,
	}})
	if err != nil {
		return nil, fmt.Errorf("encoding the allocation patch of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	patched, err := s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("recording the allocation on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return patched, nil
}

// updateStatus applies mutate to the pod's status and writes it: first on
// pod as given (the informer's copy, or a write's answer), and when that
// copy turns out stale, on the pod read again.
func (s *Simulator) updateStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.PodStatus, *corev1.Pod)) error {
	pods := s.client.CoreV1().Pods(pod.Namespace)
	next := pod.DeepCopy()
	mutate(&next.Status, next)
	_, err := pods.UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		if err != nil {
			return fmt.Errorf("updating the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		return nil
	}
	latest, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if latest.UID != pod.UID {
		return nil
	}
	mutate(&latest.Status, latest)
	if _, err := pods.UpdateStatus(ctx, latest, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// runningStatus is the status of a pod whose containers all started.
func (s *Simulator) runningStatus(st *corev1.PodStatus, pod *corev1.Pod) {
	if st.Phase == corev1.PodRunning {
		return
	}
	now := metav1.Now()
	st.Phase = corev1.PodRunning
	st.Reason, st.Message = "", ""
	st.HostIP = s.nodeIP
	st.HostIPs = []corev1.HostIP{{IP: s.nodeIP}}
	ip := s.podIP(pod)
	st.PodIP = ip
	st.PodIPs = []corev1.PodIP{{IP: ip}}
	st.StartTime = &now
	st.Conditions = mergeConditions(st.Conditions,
		corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled)
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: containerID(pod, c.Name),
			}},
		})
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
}

// terminatedStatus is the status of a pod whose containers exited with
// code.
func terminatedStatus(st *corev1.PodStatus, pod *corev1.Pod, code int32) {
	now := metav1.Now()
	st.Phase = corev1.PodSucceeded
	reason := "Completed"
	if code != 0 {
		st.Phase = corev1.PodFailed
		reason = "Error"
	}
	for i := range st.Conditions {
		switch st.Conditions[i].Type {
		case corev1.PodReady, corev1.ContainersReady, corev1.PodReadyToStartContainers:
			st.Conditions[i].Status = corev1.ConditionFalse
			st.Conditions[i].Reason = "PodCompleted"
			st.Conditions[i].LastTransitionTime = now
		}
	}
	started := now
	if st.StartTime != nil {
		started = *st.StartTime
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: now, ContainerID: containerID(pod, c.Name),
			}},
		})
	}
}

// mergeConditions sets each condition type to True, keeping transition
// times of conditions that were True already.
func mergeConditions(old []corev1.PodCondition, types ...corev1.PodConditionType) []corev1.PodCondition {
	now := metav1.Now()
	out := make([]corev1.PodCondition, 0, len(types))
	for _, t := range types {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
		for _, o := range old {
			if o.Type == t && o.Status == corev1.ConditionTrue {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		out = append(out, c)
	}
	for _, o := range old {
		known := false
		for _, t := range types {
			known = known || o.Type == t
		}
		if !known {
			out = append(out, o)
		}
	}
	return out
}

func containerID(pod *corev1.Pod, name string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(string(pod.UID) + "/" + name))
	return fmt.Sprintf("gpuplane-sim://%016x", h.Sum64())
}

// podIP hands out addresses from 10.<node>.0.0/16, the node's octet derived
// from its name.
func (s *Simulator) podIP(_ *corev1.Pod) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s.cfg.NodeName))
	s.mu.Lock()
	s.nextIP++
	n := s.nextIP
	s.mu.Unlock()
	return fmt.Sprintf("10.%d.%d.%d", 64+h.Sum32()%128, (n/254)%256, n%254+1)
}

// event records a Warning event on the pod from the node's kubelet.
func (s *Simulator) event(ctx context.Context, pod *corev1.Pod, reason, message string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		},
		Reason: reason, Message: message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: s.cfg.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "kubelet", ReportingInstance: s.cfg.NodeName,
	}
	if _, err := s.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		s.log.Warn("recording an event", "pod", pod.Namespace+"/"+pod.Name, "reason", reason, "err", err)
	}
}

// summarize is a short log form of an allocation.
func summarize(a *gpupod.PodAllocation) map[string][]string {
	out := map[string][]string{}
	for _, c := range a.Containers {
		for r, ids := range c.Devices {
			out[r] = append(out[r], ids...)
		}
	}
	return out
}

// PodAllocations returns the allocations of the pods currently holding
// devices, by namespace/name.
func (s *Simulator) PodAllocations() map[string]*gpupod.PodAllocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*gpupod.PodAllocation{}
	for key, st := range s.pods {
		if !st.terminal && st.allocation != nil {
			out[key] = st.allocation
		}
	}
	return out
}
