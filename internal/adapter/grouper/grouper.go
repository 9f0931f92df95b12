package grouper

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

const (
	// maxOwnerDepth bounds the owner chain walked from a pod: the deepest
	// real chain (pod, StatefulSet, leader pod, StatefulSet, workload) is
	// five.
	maxOwnerDepth = 8
	// decisionTTL is how long a workload's group stands before the next pod
	// of it has it worked out again (a Job's parallelism edited, a rule's
	// error fixed in the workload).
	decisionTTL = 30 * time.Second
	// forgetAfter is how long a decision no pod asked about again is kept.
	forgetAfter = 10 * decisionTTL
	// labelWorkers bounds the pod label patches in flight.
	labelWorkers = 32
	// maxWaiting bounds the pods remembered per workload while its group is
	// worked out; the rest are found again as they are updated.
	maxWaiting = 100000
)

// Config is what a Grouper needs.
type Config struct {
	// SchedulerName: only pods with this spec.schedulerName are grouped.
	SchedulerName string
	Client        kubernetes.Interface
	Dynamic       dynamic.Interface
	// Mapper maps an owner reference's kind to its resource.
	Mapper meta.ResettableRESTMapper
	Log    logr.Logger
	// Topologies gives the levels of the cluster's Topologies, onto which
	// Volcano's network tiers are mapped; nil refuses them.
	Topologies TopologyLevels
	// WorkloadAPIVersion is the apiVersion at which the cluster serves the
	// Workload API's PodGroup (scheduling.k8s.io/v1alpha3 on Kubernetes
	// 1.37, v1alpha2 on 1.36), as discovery found it; empty means
	// WorkloadPodGroupAPIVersion.
	WorkloadAPIVersion string
}

// Grouper derives PodGroups from the workloads that own pending pods. The
// scheduler's pod cache asks it, for each pending pod that names no group,
// whether the pod must wait for its group (Awaiting); the Grouper works the
// group out on its own goroutine, creates the PodGroup and labels the pod
// with it (v1alpha1.PodGroupLabel), after which the pod is an ordinary
// member. A workload whose rule gives minMember 1 (a Deployment, a Job that
// is not Indexed) makes no group: its pods stay on their own, labelled with
// the workload's queue (v1alpha1.QueueLabel) when it names one and they do
// not. Decisions are cached per owner, so a 1,000-pod job costs one owner
// walk.
type Grouper struct {
	cfg     Config
	builtin []*Rule
	queue   workqueue.TypedRateLimitingInterface[ownerKey]

	mu sync.Mutex
	// objects are the GroupingRule objects, compiled; rules the rule in
	// force per kind: an object's over a shipped one, the oldest object's
	// when several name one kind.
	objects   map[string]*ruleObject
	rules     map[schema.GroupKind]*Rule
	decisions map[types.UID]*decision
	waiting   map[types.UID]map[string]waitingPod
	// held are the pods waiting with the error of their workload's
	// decision: settled again when the decision is made anew (a rule
	// changed, or the error's retry).
	held   map[types.UID]*heldPods
	notify func(namespace, name string)
	// now is the clock decisions are aged by.
	now func() time.Time
	// statusDirty says GroupingRule conditions need writing.
	statusDirty chan struct{}
	// recorder records events on the objects groups are made from; nil
	// records none.
	recorder record.EventRecorder
}

type ruleObject struct {
	obj  *v1alpha1.GroupingRule
	rule *Rule
	err  error // compile error or the duplicate it loses to
}

// ownerKey is a pod's controller owner, or the Workload API PodGroup it
// names (ByName: the pod's reference has no UID), or the Volcano PodGroup
// its annotation names (Volcano): what a decision is cached by.
type ownerKey struct {
	Namespace, APIVersion, Kind, Name string
	UID                               types.UID
	ByName                            bool
	Volcano                           bool
}

// WorkloadPodGroupAPIVersion is the Kubernetes Workload API's PodGroup, which
// a pod names in spec.schedulingGroup.podGroupName (Kubernetes 1.36, alpha
// behind the GenericWorkload feature gate), unless Config.WorkloadAPIVersion
// names the version the cluster serves. Its spec's gang and topology read
// the same at v1alpha2 and v1alpha3.
const WorkloadPodGroupAPIVersion = "scheduling.k8s.io/v1alpha2"

// groupRef is what a pod's group is worked out from: the Workload API
// PodGroup it names (at workloadAPI, the PodGroup's apiVersion), else its
// controller owner; ok false for neither.
func groupRef(p *corev1.Pod, workloadAPI string) (ownerKey, bool) {
	if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && *sg.PodGroupName != "" {
		return ownerKey{Namespace: p.Namespace, APIVersion: workloadAPI, Kind: "PodGroup", Name: *sg.PodGroupName,
			UID: types.UID("schedulingGroup:" + p.Namespace + "/" + *sg.PodGroupName), ByName: true}, true
	}
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.UID == "" {
		return ownerKey{}, false
	}
	return ownerKey{Namespace: p.Namespace, APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}, true
}

type heldPods struct {
	key  ownerKey
	pods map[string]waitingPod
}

// holdLocked adds pods to those held with k's error, at most maxWaiting.
// Caller holds mu.
func (g *Grouper) holdLocked(k ownerKey, pods ...waitingPod) {
	h := g.held[k.UID]
	if h == nil {
		h = &heldPods{key: k, pods: map[string]waitingPod{}}
		g.held[k.UID] = h
	}
	for _, p := range pods {
		if len(h.pods) < maxWaiting {
			h.pods[p.Namespace+"/"+p.Name] = p
		}
	}
}

// waitingPod is a pod waiting for its group, with the key of the group it
// joins when its workload's rule splits it (spec.groupBy).
type waitingPod struct {
	types.NamespacedName
	key   string
	keyed bool // key was worked out (under a split decision)
}

type decision struct {
	group string // the PodGroup's name; "" when the pod joins none
	// queue is the queue a workload that is no gang (minMember 1) names:
	// its pods are labelled with it and stay on their own, so that each
	// can be placed, preempted and reclaimed alone, as before.
	queue string
	err   error // why the workload's group cannot be made
	// mirror: the decision is about the Volcano PodGroup a pod names by
	// annotation; group is set when a gpuplane PodGroup of that name was
	// mirrored from it. Pods are never labelled for it: their annotation
	// names the group already.
	mirror bool
	at     time.Time
	// split is set when the workload's rule splits it into a group per
	// key of its pods (spec.groupBy); group and queue are then each
	// key's, in split.groups.
	split *split
}

// needsLabel reports whether a pod without a group must be labelled by
// decision d before it is scheduled.
func (d *decision) needsLabel(p *corev1.Pod) bool {
	if d.mirror {
		return false
	}
	if d.group != "" {
		return true
	}
	if d.queue == "" {
		return false
	}
	// A pod that names a queue itself keeps it.
	q, _ := v1alpha1.PodQueueName(p.Labels, p.Annotations)
	return q.Value == ""
}

// New returns a Grouper with the shipped rules.
func New(cfg Config) (*Grouper, error) {
	b, err := Builtin()
	if err != nil {
		return nil, err
	}
	if cfg.WorkloadAPIVersion == "" {
		cfg.WorkloadAPIVersion = WorkloadPodGroupAPIVersion
	}
	g := &Grouper{cfg: cfg, builtin: b,
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[ownerKey](), workqueue.TypedRateLimitingQueueConfig[ownerKey]{Name: "grouper"}),
		objects: map[string]*ruleObject{}, decisions: map[types.UID]*decision{}, waiting: map[types.UID]map[string]waitingPod{},
		held: map[types.UID]*heldPods{}, statusDirty: make(chan struct{}, 1), notify: func(string, string) {}, now: time.Now,
	}
	g.recomputeLocked()
	return g, nil
}

// SetRecorder sets the recorder of the events the Grouper records on the
// objects it makes groups from (an invalid Volcano PodGroup).
func (g *Grouper) SetRecorder(r record.EventRecorder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recorder = r
}

// OnSettled sets the function told of a pod whose wait is over without a
// label change (it joins no group, or its group cannot be made): the pod
// cache then asks Awaiting again. It is called without the Grouper's lock.
func (g *Grouper) OnSettled(f func(namespace, name string)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.notify = f
}

// Awaiting reports whether pod p waits for the group its workload makes,
// and with an error why that group cannot be made. The group is worked out
// from the Workload API PodGroup the pod names (spec.schedulingGroup), else
// from its controller owner chain. Pods that name a group by label, are
// bound or finished, belong to another scheduler, or have neither reference
// never wait.
//
// A pod that names its group with Volcano's annotation waits while the
// Volcano PodGroup of that name, if any, is looked up, and (true) when a
// gpuplane PodGroup was mirrored from it: the caller lets it go once it
// sees that PodGroup (labelled v1alpha1.DerivedLabel). With no Volcano
// PodGroup of the name (or no Volcano CRD) it does not wait: the
// annotation names a gpuplane PodGroup.
func (g *Grouper) Awaiting(p *corev1.Pod) (bool, error) {
	if p.Spec.SchedulerName != g.cfg.SchedulerName || p.Spec.NodeName != "" || p.DeletionTimestamp != nil ||
		p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false, nil
	}
	k, ok := g.keyOf(p)
	if !ok {
		return false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.decisions[k.UID]
	wp := waitingPod{NamespacedName: nameOf(p)}
	stale := d != nil && g.now().Sub(d.at) > decisionTTL
	if d != nil && d.split != nil {
		// The key's group; a stale decision's until it is made anew.
		var err error
		if d, wp.key, err = g.splitDecisionLocked(k, d, p); err != nil {
			return true, err
		}
		wp.keyed = true
	}
	if d == nil || d.needsLabel(p) || stale {
		w := g.waiting[k.UID]
		if w == nil {
			w = map[string]waitingPod{}
			g.waiting[k.UID] = w
		}
		if len(w) < maxWaiting {
			w[p.Namespace+"/"+p.Name] = wp
		}
		g.queue.Add(k)
	}
	switch {
	case d == nil:
		return true, nil
	case d.err != nil:
		// Held with the workload's error, and settled with the others
		// when the decision is made anew (a rule fixed, the retry):
		// nothing else would ask for it again. The first held since the
		// workload's pods went (Forget) starts the retry again.
		if g.held[k.UID] == nil {
			g.queue.AddAfter(k, decisionTTL)
		}
		g.holdLocked(k, wp)
		return true, d.err
	case d.mirror:
		return d.group != "", nil
	default:
		// A group or a queue: the pod waits for its label. Neither: it
		// goes alone.
		return d.needsLabel(p), nil
	}
}

// keyOf is the workload a pod's group is derived from: the Volcano
// PodGroup its annotation names, the Workload API PodGroup it names, or
// its controller owner; false when its labels name its group, or nothing
// owns it.
func (g *Grouper) keyOf(p *corev1.Pod) (ownerKey, bool) {
	named, _ := v1alpha1.PodGroupName(p.Labels, p.Annotations)
	switch {
	case named.From.Name == v1alpha1.VolcanoGroupAnnotation && named.From.Annotation:
		return volcanoKey(p.Namespace, named.Value), true
	case named.Value != "":
		return ownerKey{}, false
	}
	return groupRef(p, g.cfg.WorkloadAPIVersion)
}

// Forget drops a deleted pod from those waiting for its group or held
// with its workload's error. A workload left with none held is asked for
// no more, and its decision is forgotten in time (forgetOld): a workload
// whose group cannot be made, deleted with its pods, would otherwise be
// looked up every decisionTTL for as long as the scheduler runs.
func (g *Grouper) Forget(p *corev1.Pod) {
	k, ok := g.keyOf(p)
	if !ok {
		return
	}
	name := p.Namespace + "/" + p.Name
	g.mu.Lock()
	defer g.mu.Unlock()
	if w := g.waiting[k.UID]; w != nil {
		delete(w, name)
		if len(w) == 0 {
			delete(g.waiting, k.UID)
		}
	}
	if h := g.held[k.UID]; h != nil {
		delete(h.pods, name)
		if len(h.pods) == 0 {
			delete(g.held, k.UID)
		}
	}
}

// forgetOld drops the decisions no pod has needed for a while: a CronJob's
// Jobs, each with a UID of its own, would otherwise grow the cache for good.
// A pod of a forgotten workload only costs the walk again.
func (g *Grouper) forgetOld() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	for uid, d := range g.decisions {
		if now.Sub(d.at) > forgetAfter && g.waiting[uid] == nil && g.held[uid] == nil {
			delete(g.decisions, uid)
		}
	}
}

// rule is the rule in force for a kind, nil for none.
func (g *Grouper) rule(gk schema.GroupKind) *Rule {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rules[gk]
}

// Run works out groups until ctx ends. Only the leading replica runs it;
// a standby's pods wait in its queue for it to lead.
func (g *Grouper) Run(ctx context.Context) {
	defer g.queue.ShutDown()
	go func() {
		<-ctx.Done()
		g.queue.ShutDown()
	}()
	go g.writeStatuses(ctx)
	go func() {
		t := time.NewTicker(decisionTTL)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.forgetOld()
			}
		}
	}()
	for {
		k, quit := g.queue.Get()
		if quit {
			return
		}
		if err := g.process(ctx, k); err != nil && ctx.Err() == nil {
			g.cfg.Log.Error(err, "deriving a pod group; retrying", "owner", k.Kind+"/"+k.Name, "namespace", k.Namespace)
			g.queue.AddRateLimited(k)
		} else {
			g.queue.Forget(k)
		}
		g.queue.Done(k)
	}
}

// process decides k's group, when not decided lately, and settles the
// pods waiting for it.
func (g *Grouper) process(ctx context.Context, k ownerKey) error {
	g.mu.Lock()
	d := g.decisions[k.UID]
	g.mu.Unlock()
	fresh := false
	if d == nil || g.now().Sub(d.at) > decisionTTL {
		nd, err := g.decide(ctx, k)
		if err != nil {
			return err
		}
		nd.at = g.now()
		d, fresh = nd, true
		g.mu.Lock()
		g.decisions[k.UID] = d
		g.mu.Unlock()
	}
	if d.split != nil {
		if err := g.decideKeys(ctx, k, d); err != nil {
			return err
		}
	}
	g.mu.Lock()
	pods := g.waiting[k.UID]
	delete(g.waiting, k.UID)
	var reask []waitingPod
	if h := g.held[k.UID]; h != nil && fresh {
		if d.split != nil {
			// Their keys were worked out under the old decision: they
			// ask again.
			reask = slices.Collect(maps.Values(h.pods))
		} else {
			if pods == nil {
				pods = map[string]waitingPod{}
			}
			maps.Copy(pods, h.pods)
		}
		delete(g.held, k.UID)
	}
	// Each pod's decision: the workload's, or its key's group's.
	by := map[*decision][]waitingPod{}
	for key, p := range pods {
		pd := d
		if d.split != nil && !p.keyed {
			// It asked before the workload was found to split: it asks
			// again, and its key is worked out.
			reask = append(reask, p)
			continue
		}
		if d.split != nil {
			if pd = d.split.groups[p.key]; pd == nil {
				// A key first seen while the others were decided.
				if g.waiting[k.UID] == nil {
					g.waiting[k.UID] = map[string]waitingPod{}
				}
				g.waiting[k.UID][key] = p
				g.queue.Add(k)
				continue
			}
		}
		by[pd] = append(by[pd], p)
	}
	failedAny := false
	for pd, ps := range by {
		if pd.err == nil {
			continue
		}
		failedAny = true
		g.holdLocked(k, ps...)
	}
	notify := g.notify
	holding := g.held[k.UID] != nil
	g.mu.Unlock()
	if ((fresh && d.err != nil) || failedAny) && holding {
		// The workload or the rule may be fixed without a pod changing;
		// once its pods are gone (Forget), nothing asks.
		g.queue.AddAfter(k, decisionTTL)
	}
	for _, p := range reask {
		notify(p.Namespace, p.Name)
	}
	var errs []error
	for pd, ps := range by {
		if err := g.settle(ctx, k, pd, ps, notify); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// settle labels pods with their group, or with their queue when their
// workload makes no gang, or tells the pod cache that they wait no more
// for a label (no group and no queue, or an error).
func (g *Grouper) settle(ctx context.Context, k ownerKey, d *decision, pods []waitingPod, notify func(namespace, name string)) error {
	key, value := v1alpha1.PodGroupLabel, d.group
	if d.group == "" {
		key, value = v1alpha1.QueueLabel, d.queue
	}
	if value == "" || d.err != nil || d.mirror {
		for _, p := range pods {
			notify(p.Namespace, p.Name)
		}
		return nil
	}
	// A gang starts once every member is labelled: the patches go out
	// together (within the client's rate limit), not one after another.
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value))
	var (
		failed    []waitingPod
		forbidden error
		mu        sync.Mutex
		wg        sync.WaitGroup
		sem       = make(chan struct{}, labelWorkers)
	)
	for _, p := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := g.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "gpuplane-scheduler"})
			if err != nil && !apierrors.IsNotFound(err) {
				mu.Lock()
				failed = append(failed, p)
				if apierrors.IsForbidden(err) {
					forbidden = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if forbidden != nil {
		// Without the right to label pods no retry helps: the pods say
		// so, and the decision is made again (rights granted) later.
		nd := &decision{err: fmt.Errorf("gpuplane-scheduler may not label pods with their group (grant it patch on pods): %w", forbidden), at: g.now()}
		g.mu.Lock()
		g.decisions[k.UID] = nd
		g.holdLocked(k, pods...)
		g.mu.Unlock()
		g.queue.AddAfter(k, decisionTTL)
		for _, p := range pods {
			notify(p.Namespace, p.Name)
		}
		return nil
	}
	if len(failed) > 0 {
		g.mu.Lock()
		w := g.waiting[k.UID]
		if w == nil {
			w = map[string]waitingPod{}
			g.waiting[k.UID] = w
		}
		for _, p := range failed {
			w[p.Namespace+"/"+p.Name] = p
		}
		g.mu.Unlock()
		return fmt.Errorf("labelling %d pods with pod group %q or queue %q", len(failed), d.group, d.queue)
	}
	return nil
}

// decide walks k's owner chain and makes the group of the topmost owner
// that has a rule. An error return is transient (the API); a decision with
// an error is the workload's or the rule's to fix.
func (g *Grouper) decide(ctx context.Context, k ownerKey) (*decision, error) {
	if k.Volcano {
		return g.decideVolcano(ctx, k)
	}
	var top *unstructured.Unstructured
	var topRule *Rule
	ref := &metav1.OwnerReference{APIVersion: k.APIVersion, Kind: k.Kind, Name: k.Name, UID: k.UID}
	for range maxOwnerDepth {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			break
		}
		gk := schema.GroupKind{Group: gv.Group, Kind: ref.Kind}
		rule := g.rule(gk)
		obj, err := g.get(ctx, gv.WithKind(ref.Kind), k.Namespace, ref.Name)
		switch {
		case err == nil:
		case k.ByName && apierrors.IsNotFound(err):
			// The Workload API lets a pod name its PodGroup before the
			// PodGroup exists: it waits for it.
			return &decision{err: fmt.Errorf("%s %s/%s, named by the pod's spec.schedulingGroup, does not exist yet", gk, k.Namespace, ref.Name)}, nil
		case rule != nil && meta.IsNoMatchError(err):
			return &decision{err: fmt.Errorf("the API server does not serve %s: %w", gk, err)}, nil
		case apierrors.IsNotFound(err) || errors.Is(err, errNotNamespaced):
			// The owner is gone (its pods follow) or is not a workload.
			obj = nil
		case rule != nil && apierrors.IsForbidden(err):
			// Said on the pods, not only in the log: without it they
			// would wait with no reason.
			return &decision{err: fmt.Errorf("gpuplane-scheduler may not read %s %s/%s: grant it get on %s (the chart's scheduler.workloadKinds)", gk, k.Namespace, ref.Name, gk)}, nil
		case rule != nil:
			return nil, fmt.Errorf("reading %s %s/%s: %w", gk, k.Namespace, ref.Name, err)
		default:
			// An owner without a rule that cannot be read (no RBAC to read
			// an unknown kind): the chain ends here.
			g.cfg.Log.V(1).Info("owner not readable; the chain ends below it", "owner", gk.String()+"/"+ref.Name, "err", err.Error())
			obj = nil
		}
		if obj == nil || (obj.GetUID() != ref.UID && !k.ByName) {
			break
		}
		if rule != nil {
			top, topRule = obj, rule
		}
		if k.ByName {
			// The PodGroup the pod names is its group, whatever owns it.
			break
		}
		if ref = metav1.GetControllerOfNoCopy(obj); ref == nil {
			break
		}
	}
	if top == nil {
		return &decision{}, nil
	}
	if topRule.Splits() {
		// Each key's group is made as the first pod with the key asks.
		return &decision{split: &split{rule: topRule, top: top, groups: map[string]*decision{}}}, nil
	}
	return g.makeGroup(ctx, top, topRule, "")
}

// makeGroup works out the group of key group ("" when the rule does not
// split) of workload top under rule r and makes its PodGroup. An error
// return is transient; a decision with an error is the workload's or the
// rule's to fix.
func (g *Grouper) makeGroup(ctx context.Context, top *unstructured.Unstructured, r *Rule, group string) (*decision, error) {
	d, err := r.EvalGroup(top.Object, group, top.GetLabels(), top.GetAnnotations())
	if err != nil {
		if r.Splits() {
			return &decision{err: fmt.Errorf("%s %s, group %q: %w", top.GetKind(), top.GetName(), group, err)}, nil
		}
		return &decision{err: fmt.Errorf("%s %s: %w", top.GetKind(), top.GetName(), err)}, nil
	}
	if d.MinMember <= 1 {
		// No gang: the pods stay on their own, in the workload's queue.
		return &decision{queue: d.Queue}, nil
	}
	tc, why, err := workloadTopology(top, r)
	if err != nil {
		return &decision{err: err}, nil
	}
	if tc != nil {
		d.Topology = tc
		d.Explain += "; " + why
	}
	name := SplitGroupName(top.GetKind(), top.GetName(), top.GetUID(), group)
	if err := g.ensurePodGroup(ctx, name, top, d); err != nil {
		var perm *permanentError
		if errors.As(err, &perm) || apierrors.IsForbidden(err) {
			return &decision{err: err}, nil
		}
		return nil, err
	}
	return &decision{group: name}, nil
}

var errNotNamespaced = errors.New("not a namespaced kind")

// get reads one owner, refreshing the mapper once when the kind is new to
// it (an operator's CRD installed after the scheduler started).
func (g *Grouper) get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	m, err := g.cfg.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		g.cfg.Mapper.Reset()
		m, err = g.cfg.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, errNotNamespaced
	}
	return g.cfg.Dynamic.Resource(m.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

// ensurePodGroup creates the workload's PodGroup (top is the workload, or
// the Volcano PodGroup it is mirrored from), or brings its spec up to date
// with the workload's. It never takes over a PodGroup it did not make.
func (g *Grouper) ensurePodGroup(ctx context.Context, name string, top *unstructured.Unstructured, d Derived) error {
	ns := top.GetNamespace()
	from := fmt.Sprintf("%s %s/%s: %s", schema.FromAPIVersionAndKind(top.GetAPIVersion(), top.GetKind()).GroupKind(), ns, top.GetName(), d.Explain)
	want := &v1alpha1.PodGroup{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{v1alpha1.DerivedLabel: "true"},
			Annotations: map[string]string{v1alpha1.DerivedFromAnnotation: from},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: top.GetAPIVersion(), Kind: top.GetKind(), Name: top.GetName(), UID: top.GetUID(),
				Controller: new(true)}},
		},
		Spec: v1alpha1.PodGroupSpec{MinMember: d.MinMember, Queue: d.Queue, PriorityClassName: d.PriorityClassName, MinResources: d.MinResources, Topology: d.Topology},
	}
	res := g.cfg.Dynamic.Resource(v1alpha1.PodGroupsResource).Namespace(ns)
	cur, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
		if err != nil {
			return err
		}
		_, err = res.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{FieldManager: "gpuplane-scheduler"})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("PodGroup %s/%s created meanwhile; retrying", ns, name)
		}
		if err == nil {
			g.cfg.Log.Info("derived a pod group", "podGroup", ns+"/"+name, "from", from)
		}
		return err
	}
	if err != nil {
		return err
	}
	if cur.GetLabels()[v1alpha1.DerivedLabel] != "true" {
		if top.GroupVersionKind() == VolcanoPodGroupKind {
			return &permanentError{fmt.Sprintf("the pods' annotation %s names both Volcano PodGroup %s/%s and a PodGroup of gpuplane's of the same name, which gpuplane-scheduler did not make: delete one of them",
				v1alpha1.VolcanoGroupAnnotation, ns, name)}
		}
		return &permanentError{fmt.Sprintf("PodGroup %s/%s exists and was not made by gpuplane-scheduler: delete it, or label the pods with %s to use it", ns, name, v1alpha1.PodGroupLabel)}
	}
	var have v1alpha1.PodGroup
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &have); err != nil {
		return err
	}
	if have.Spec.MinMember == want.Spec.MinMember && have.Spec.Queue == want.Spec.Queue && have.Spec.PriorityClassName == want.Spec.PriorityClassName &&
		equality.Semantic.DeepEqual(have.Spec.MinResources, want.Spec.MinResources) && equality.Semantic.DeepEqual(have.Spec.Topology, want.Spec.Topology) &&
		have.Annotations[v1alpha1.DerivedFromAnnotation] == from &&
		equality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) {
		return nil
	}
	have.Spec.MinMember, have.Spec.Queue, have.Spec.PriorityClassName = want.Spec.MinMember, want.Spec.Queue, want.Spec.PriorityClassName
	have.Spec.MinResources, have.Spec.Topology = want.Spec.MinResources, want.Spec.Topology
	// An owner recreated under the same name (a Volcano PodGroup deleted and
	// made again before the garbage collector took the old mirror) owns it.
	have.OwnerReferences = want.OwnerReferences
	if have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	have.Annotations[v1alpha1.DerivedFromAnnotation] = from
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&have)
	if err != nil {
		return err
	}
	_, err = res.Update(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: "gpuplane-scheduler"})
	return err
}

// GroupName is the PodGroup made for a workload: its kind and name, cut
// to fit a label value, and a digest of its UID, so that a workload
// recreated under the same name gets a group of its own.
func GroupName(kind, name string, uid types.UID) string {
	return SplitGroupName(kind, name, uid, "")
}

// SplitGroupName is the PodGroup made for the group of key group of a
// workload its rule splits (spec.groupBy): GroupName's with the key
// before the digest, which covers the key too (a long key is left out
// of the name; the derived-from annotation gives it).
func SplitGroupName(kind, name string, uid types.UID, group string) string {
	id := string(uid)
	if group != "" {
		id += "/" + group
	}
	sum := sha256.Sum256([]byte(id))
	tail := "-" + hex.EncodeToString(sum[:])[:6]
	if group != "" && len(group) <= 24 {
		tail = "-" + group + tail
	}
	base := strings.ToLower(kind) + "-" + name
	if limit := 63 - len(tail); len(base) > limit {
		base = strings.TrimRight(base[:limit], "-.")
	}
	return base + tail
}

// UpsertRule takes a GroupingRule object in (the informer's add and
// update).
func (g *Grouper) UpsertRule(o *v1alpha1.GroupingRule) {
	r, err := Compile(o.Name, o.Spec)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.objects[o.Name] = &ruleObject{obj: o, rule: r, err: err}
	g.recomputeLocked()
}

// DeleteRule drops a GroupingRule object.
func (g *Grouper) DeleteRule(o *v1alpha1.GroupingRule) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.objects, o.Name)
	g.recomputeLocked()
}

// recomputeLocked rebuilds the rule in force per kind and forgets every
// decision, so that the next pod of each workload is grouped by the new
// rules. Caller holds mu.
func (g *Grouper) recomputeLocked() {
	rules := map[schema.GroupKind]*Rule{}
	for _, r := range g.builtin {
		rules[r.Target] = r
	}
	objs := make([]*ruleObject, 0, len(g.objects))
	for _, o := range g.objects {
		objs = append(objs, o)
	}
	slices.SortFunc(objs, func(a, b *ruleObject) int {
		return cmp.Or(a.obj.CreationTimestamp.Compare(b.obj.CreationTimestamp.Time), cmp.Compare(a.obj.Name, b.obj.Name))
	})
	owner := map[schema.GroupKind]string{}
	for _, o := range objs {
		var dup *permanentError
		if errors.As(o.err, &dup) {
			o.err = nil
		}
		if o.rule == nil {
			continue
		}
		if first, taken := owner[o.rule.Target]; taken {
			o.err = &permanentError{fmt.Sprintf("GroupingRule %s already targets %s; this one is not used", first, o.rule.Target)}
			continue
		}
		owner[o.rule.Target] = o.obj.Name
		rules[o.rule.Target] = o.rule
	}
	g.rules = rules
	clear(g.decisions)
	for _, h := range g.held {
		g.queue.Add(h.key)
	}
	g.markStatusDirty()
}

func (g *Grouper) markStatusDirty() {
	select {
	case g.statusDirty <- struct{}{}:
	default:
	}
}

// writeStatuses keeps each GroupingRule's Valid condition true to what
// was made of it.
func (g *Grouper) writeStatuses(ctx context.Context) {
	written := map[string]metav1.Condition{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.statusDirty:
		}
		g.mu.Lock()
		var todo []*ruleObject
		for _, o := range g.objects {
			todo = append(todo, o)
		}
		g.mu.Unlock()
		for _, o := range todo {
			c := metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionTrue, Reason: "Compiled", Message: "the rule is in force for " + o.obj.Spec.Target.Kind}
			if o.err != nil {
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Invalid", o.err.Error()
				var dup *permanentError
				if errors.As(o.err, &dup) {
					c.Reason = "DuplicateTarget"
				}
			}
			if prev, ok := written[o.obj.Name]; ok && prev == c {
				continue
			}
			if cur := meta.FindStatusCondition(o.obj.Status.Conditions, c.Type); cur != nil && cur.Status == c.Status && cur.Reason == c.Reason && cur.Message == c.Message {
				written[o.obj.Name] = c
				continue
			}
			c.ObservedGeneration = o.obj.Generation
			c.LastTransitionTime = metav1.Now()
			if cur := meta.FindStatusCondition(o.obj.Status.Conditions, c.Type); cur != nil && cur.Status == c.Status {
				c.LastTransitionTime = cur.LastTransitionTime
			}
			patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []metav1.Condition{c}}})
			if err != nil {
				continue
			}
			_, err = g.cfg.Dynamic.Resource(v1alpha1.GroupingRulesResource).Patch(ctx, o.obj.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
			if err != nil && !apierrors.IsNotFound(err) {
				g.cfg.Log.Error(err, "writing a GroupingRule's condition; retrying", "rule", o.obj.Name)
				time.AfterFunc(5*time.Second, g.markStatusDirty)
				continue
			}
			written[o.obj.Name] = c
		}
	}
}
