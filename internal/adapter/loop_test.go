package adapter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// fakeWriter carries out the loop's API calls in memory: binds and commits
// succeed at once (or fail as told), evictions are granted (or refused).
type fakeWriter struct {
	mu         sync.Mutex
	binds      []string          // "pod node gpus"
	queues     map[string]string // pod -> the queue its binding records
	gangs      map[string][]v1alpha1.MemberPlacement
	evicted    []string
	notices    []notice // the notice each eviction gave, in evicted's order
	deleted    []string
	refuse     bool
	commitFail error
	// bindFail fails every bind; claims and claimWrites record the claim
	// updates binds carry ("claim pod node devices", "-" for a join).
	bindFail    error
	claims      []string
	claimWrites []claimWrite
	// volumes records the volume writes binds carry ("pod claim pv node",
	// "-" for provisioning).
	volumes []string
	// ungated records the pods whose gate was lifted: "pod" when the core
	// said they wait for capacity, "pod bind" before a bind.
	ungated []string
}

var _ clusterWriter = (*fakeWriter)(nil)

func (f *fakeWriter) bind(_ context.Context, t bindTask) {
	f.mu.Lock()
	for _, w := range t.claims {
		devs := "-"
		node := t.node
		if w.Alloc != nil {
			var names []string
			for _, r := range w.Alloc.Devices.Results {
				names = append(names, r.Pool+"/"+r.Device)
			}
			devs = strings.Join(names, ",")
			node = allocationNode(w.Alloc)
		}
		f.claims = append(f.claims, fmt.Sprintf("%s %s %s %s", claimKey(w.Claim), podKey(w.Pod), node, devs))
		f.claimWrites = append(f.claimWrites, w)
	}
	for _, w := range t.volumes {
		pv := "-"
		if w.pv != nil {
			pv = w.pv.Name
		}
		f.volumes = append(f.volumes, fmt.Sprintf("%s %s %s %s", podKey(t.pod), w.claim.Name, pv, w.node))
	}
	if t.gated {
		f.ungated = append(f.ungated, podKey(t.pod)+" bind")
	}
	if f.bindFail != nil {
		f.mu.Unlock()
		t.done(f.bindFail)
		return
	}
	f.binds = append(f.binds, fmt.Sprintf("%s %s %s", podKey(t.pod), t.node, formatShares(t.shares)))
	if f.queues == nil {
		f.queues = map[string]string{}
	}
	f.queues[podKey(t.pod)] = t.queue
	f.mu.Unlock()
	t.done(nil)
}

func (f *fakeWriter) bindGang(ctx context.Context, pg *v1alpha1.PodGroup, placement []v1alpha1.MemberPlacement, members []bindTask, committed func(error)) {
	committed(f.commitFail)
	if f.commitFail != nil {
		for _, m := range members {
			m.done(f.commitFail)
		}
		return
	}
	f.mu.Lock()
	if f.gangs == nil {
		f.gangs = map[string][]v1alpha1.MemberPlacement{}
	}
	f.gangs[pg.Namespace+"/"+pg.Name] = placement
	f.mu.Unlock()
	for _, m := range members {
		f.bind(ctx, m)
	}
}

func (f *fakeWriter) evict(_ context.Context, pod *corev1.Pod, n notice, _, _ string, done func(refused bool)) {
	f.mu.Lock()
	f.evicted = append(f.evicted, podKey(pod))
	f.notices = append(f.notices, n)
	f.mu.Unlock()
	done(f.refuse)
}

func (f *fakeWriter) deletePod(_ context.Context, pod *corev1.Pod, _ string) {
	f.mu.Lock()
	f.deleted = append(f.deleted, podKey(pod))
	f.mu.Unlock()
}

func (f *fakeWriter) ungate(_ context.Context, pod *corev1.Pod) {
	f.mu.Lock()
	f.ungated = append(f.ungated, podKey(pod))
	f.mu.Unlock()
}

// fakeStatus records what the loop says.
type fakeStatus struct {
	mu         sync.Mutex
	events     []string                  // "Reason object: message"
	conditions map[string]string         // pod -> "reason: message"
	statuses   map[string]runtime.Object // key -> object
}

var _ statusSink = (*fakeStatus)(nil)

func (s *fakeStatus) event(obj runtime.Object, _, reason, msg string) {
	name := ""
	if o, ok := obj.(metav1.Object); ok {
		name = o.GetName()
	}
	s.mu.Lock()
	s.events = append(s.events, fmt.Sprintf("%s %s: %s", reason, name, msg))
	s.mu.Unlock()
}

func (s *fakeStatus) podCondition(pod *corev1.Pod, reason, msg string) {
	s.mu.Lock()
	if s.conditions == nil {
		s.conditions = map[string]string{}
	}
	s.conditions[podKey(pod)] = reason + ": " + msg
	s.mu.Unlock()
}

func (s *fakeStatus) updateStatus(key string, _ schema.GroupVersionResource, _ string, obj runtime.Object) {
	s.mu.Lock()
	if s.statuses == nil {
		s.statuses = map[string]runtime.Object{}
	}
	s.statuses[key] = obj
	s.mu.Unlock()
}

// loopFixture is a loop over a cache the test fills, writing to fakes.
type loopFixture struct {
	t      *testing.T
	cache  *clusterCache
	api    *fakeWriter
	status *fakeStatus
	loop   *loop
	now    time.Time
}

func newLoopFixture(t *testing.T, cfg Config, nodes ...*corev1.Node) *loopFixture {
	t.Helper()
	cfg = cfg.Defaults()
	f := &loopFixture{t: t, cache: newClusterCache(cfg.SchedulerName), api: &fakeWriter{}, status: &fakeStatus{}, now: time.Unix(1000, 0)}
	for _, n := range nodes {
		f.cache.upsertNode(n)
	}
	l, err := newLoop(cfg, logr.Discard(), f.cache, f.api, f.status, newMetrics())
	if err != nil {
		t.Fatal(err)
	}
	f.loop = l
	return f
}

// cycle runs one cycle at a time a second after the last.
func (f *loopFixture) cycle() {
	f.t.Helper()
	f.now = f.now.Add(time.Second)
	if err := f.loop.cycle(context.Background(), f.now); err != nil {
		f.t.Fatal(err)
	}
}

// gpuNode is a node of gpus GPUs, 64 CPUs and 256 GiB.
func gpuNode(name string, gpus int) *corev1.Node {
	return build.Node(name).Resources(rl("nvidia.com/gpu", fmt.Sprint(gpus), "cpu", "64", "memory", "256Gi")).Obj()
}

// podGroup is a gang of minMember pods in namespace ns.
func podGroup(name string, minMember int32) *v1alpha1.PodGroup {
	return build.PodGroup("ns", name, minMember).UID("uid-" + name).Obj()
}

func TestLoopBindsGangsWholeOrNotAtAll(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8), gpuNode("b", 8))
	f.cache.upsertPodGroup(podGroup("fits", 3))
	// too-big would fit the two nodes alone (16 GPUs), not beside fits.
	f.cache.upsertPodGroup(podGroup("too-big", 2))
	for i := range 3 {
		f.cache.upsertPod(newPod("ns", fmt.Sprint("fits-", i)).GPUs(4).Label(v1alpha1.PodGroupLabel, "fits").Obj())
	}
	for i := range 2 {
		f.cache.upsertPod(newPod("ns", fmt.Sprint("big-", i)).GPUs(8).Label(v1alpha1.PodGroupLabel, "too-big").Obj())
	}
	f.cycle()
	rec := f.api.gangs["ns/fits"]
	if len(rec) != 3 || len(f.api.binds) != 3 {
		t.Fatalf("recorded %+v and bound %v, want the 3-pod gang recorded and bound", rec, f.api.binds)
	}
	for _, m := range rec {
		if m.Node == "" || m.GPUs == "" {
			t.Errorf("placement %+v lacks node or GPUs", m)
		}
	}
	if _, ok := f.api.gangs["ns/too-big"]; ok {
		t.Error("the gang that does not fit whole was recorded")
	}
	for _, b := range f.api.binds {
		if strings.HasPrefix(b, "ns/big-") {
			t.Errorf("a member of the gang that does not fit was bound: %s", b)
		}
	}
	f.cache.mu.Lock()
	assumed := len(f.cache.assumed)
	f.cache.mu.Unlock()
	if assumed != 3 {
		t.Errorf("%d binds assumed, want 3 (the cache counts them until the informer shows them)", assumed)
	}
	// Node a is full and b has 4 GPUs left: none of the 8-GPU members fits.
	if got := f.status.conditions["ns/big-0"]; !strings.Contains(got, "gang 0/2 placeable (0 already bound); 0/2 nodes available: 2 insufficient nvidia.com/gpu") {
		t.Errorf("the waiting gang's pods say %q, want how much of the gang fits and why", got)
	}
	if _, ok := f.status.statuses["pg/ns/too-big"].(*v1alpha1.PodGroup); !ok {
		t.Error("no PodGroup status written for the waiting gang")
	}
}

func TestLoopRetriesAGangWhoseRecordFails(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	f.api.commitFail = fmt.Errorf("conflict")
	f.cache.upsertPodGroup(podGroup("g", 2))
	f.cache.upsertPod(newPod("ns", "g-0").GPUs(4).Label(v1alpha1.PodGroupLabel, "g").Obj())
	f.cache.upsertPod(newPod("ns", "g-1").GPUs(4).Label(v1alpha1.PodGroupLabel, "g").Obj())
	f.cycle()
	if len(f.api.binds) != 0 {
		t.Fatalf("bound %v though the placement was not recorded", f.api.binds)
	}
	if !slices.ContainsFunc(f.status.events, func(e string) bool { return strings.HasPrefix(e, "FailedCommit g:") }) {
		t.Errorf("events %v, want FailedCommit on the PodGroup", f.status.events)
	}
	f.api.commitFail = nil
	f.cycle()
	if len(f.api.binds) != 2 {
		t.Fatalf("bound %v after the record succeeded, want the whole gang", f.api.binds)
	}
}

// lowPods runs low-0 and low-1, of priority 1 and 4 GPUs each, on node
// a's GPUs 0-3 and 4-7, low-1 the newer.
func (f *loopFixture) lowPods() {
	low := int32(1)
	for i, gpus := range []string{"0,1,2,3", "4,5,6,7"} {
		p := newPod("ns", fmt.Sprint("low-", i)).GPUs(4).Obj()
		p.Spec.NodeName, p.Spec.Priority = "a", &low
		p.Annotations = map[string]string{GPUsAnnotation: gpus}
		p.CreationTimestamp = metav1.Unix(int64(100+i), 0)
		f.cache.upsertPod(p)
	}
}

func TestLoopEvictsThenBindsThePreemptorWhereItWaited(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", refuse), func(t *testing.T) {
			f := newLoopFixture(t, Config{}, gpuNode("a", 8))
			f.api.refuse = refuse
			f.lowPods()
			high := int32(100)
			urgent := newPod("ns", "urgent").GPUs(4).Obj()
			urgent.Spec.Priority = &high
			f.cache.upsertPod(urgent)
			f.cycle()
			if len(f.api.evicted) != 1 || f.api.evicted[0] != "ns/low-1" {
				t.Fatalf("evicted %v, want the newest low-priority pod", f.api.evicted)
			}
			if len(f.api.binds) != 0 {
				t.Fatalf("bound %v before the victim left", f.api.binds)
			}
			if refuse {
				// A PodDisruptionBudget said no: that victim is left alone
				// for the back-off, and the core picks another.
				f.cycle()
				if len(f.api.binds) != 0 || !slices.Equal(f.api.evicted, []string{"ns/low-1", "ns/low-0"}) {
					t.Fatalf("after a refusal: bound %v, evicted %v; want the other pod asked next", f.api.binds, f.api.evicted)
				}
				return
			}
			// The victim goes; the preemptor binds where its room was held.
			f.cache.deletePod(f.cache.pods["ns/low-1"].pod)
			f.cycle()
			if len(f.api.binds) != 1 || f.api.binds[0] != "ns/urgent a 4,5,6,7" {
				t.Fatalf("bound %v, want urgent on the victim's GPUs", f.api.binds)
			}
		})
	}
}

// Two preemptors fit in what one victim leaves: the second waits for the
// first one's victim, neither bound beside it while it runs nor evicting
// another pod; a refusal of that eviction ends both holds.
func TestLoopSecondPreemptorWaitsForTheFirstOnesVictim(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", refuse), func(t *testing.T) {
			f := newLoopFixture(t, Config{}, gpuNode("a", 8))
			f.api.refuse = refuse
			f.lowPods()
			high := int32(100)
			for i, name := range []string{"urgent-a", "urgent-b"} {
				p := newPod("ns", name).GPUs(2).Obj()
				p.Spec.Priority = &high
				p.CreationTimestamp = metav1.Unix(int64(200+i), 0)
				f.cache.upsertPod(p)
			}
			f.cycle()
			if !slices.Equal(f.api.evicted, []string{"ns/low-1"}) || len(f.api.binds) != 0 {
				t.Fatalf("evicted %v, bound %v; want low-1 evicted and nothing bound while it runs", f.api.evicted, f.api.binds)
			}
			holds := f.loop.binder.holds.get()
			if refuse {
				if len(holds) != 0 {
					t.Fatalf("holds %+v kept after their victim's eviction was refused", holds)
				}
				return
			}
			if len(holds) != 2 || !slices.Equal(holds[0].Victims, []string{"ns/low-1"}) || !slices.Equal(holds[1].Victims, []string{"ns/low-1"}) {
				t.Fatalf("holds %+v, want both preemptors waiting for low-1", holds)
			}
			f.cache.deletePod(f.cache.pods["ns/low-1"].pod)
			f.cycle()
			slices.Sort(f.api.binds)
			if !slices.Equal(f.api.binds, []string{"ns/urgent-a a 4,5", "ns/urgent-b a 6,7"}) {
				t.Fatalf("bound %v, want both preemptors on the victim's GPUs", f.api.binds)
			}
		})
	}
}

// A pod with preemptionPolicy: Never waits for room instead of evicting
// lower-priority pods, and its condition says why.
func TestLoopPreemptionPolicyNeverEvictsNoOne(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	f.lowPods()
	high := int32(100)
	never := corev1.PreemptNever
	urgent := newPod("ns", "urgent").GPUs(4).Obj()
	urgent.Spec.Priority, urgent.Spec.PreemptionPolicy = &high, &never
	f.cache.upsertPod(urgent)
	f.cycle()
	if len(f.api.evicted) != 0 || len(f.api.binds) != 0 {
		t.Fatalf("evicted %v, bound %v; want neither", f.api.evicted, f.api.binds)
	}
	if got := f.status.conditions["ns/urgent"]; !strings.Contains(got, "preemptionPolicy: Never") {
		t.Errorf("urgent's condition %q, want it to name preemptionPolicy: Never", got)
	}
}

// The node gave two pods each other's chosen GPUs (gpus-held): evicting
// one frees the GPUs it holds, and the preemptor is bound there, not on
// the GPUs the scheduler once chose for the victim.
func TestLoopFollowsTheNodesRecord(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	low := int32(1)
	for i, gpus := range [][2]string{{"0,1,2,3", "4,5,6,7"}, {"4,5,6,7", "0,1,2,3"}} {
		p := newPod("ns", fmt.Sprint("low-", i)).GPUs(4).Obj()
		p.Spec.NodeName, p.Spec.Priority = "a", &low
		p.Annotations = map[string]string{GPUsAnnotation: gpus[0], HeldAnnotation: gpus[1]}
		p.CreationTimestamp = metav1.Unix(int64(100+i), 0)
		f.cache.upsertPod(p)
	}
	// A record that does not fit the request is not followed.
	odd := newPod("ns", "odd").Limits(rl("cpu", "1")).NodeName("a").Obj()
	odd.Annotations = map[string]string{HeldAnnotation: "9,9"}
	f.cache.upsertPod(odd)
	high := int32(100)
	urgent := newPod("ns", "urgent").GPUs(4).Obj()
	urgent.Spec.Priority = &high
	f.cache.upsertPod(urgent)
	f.cycle()
	if len(f.api.evicted) != 1 || f.api.evicted[0] != "ns/low-1" {
		t.Fatalf("evicted %v, want the newest low-priority pod", f.api.evicted)
	}
	f.cache.deletePod(f.cache.pods["ns/low-1"].pod)
	f.cycle()
	if len(f.api.binds) != 1 || f.api.binds[0] != "ns/urgent a 0,1,2,3" {
		t.Fatalf("bound %v, want urgent on the GPUs the victim held: 0,1,2,3", f.api.binds)
	}
}

func TestLoopTearsDownOnlyItsOwnPartlyBoundGangs(t *testing.T) {
	for _, ours := range []bool{true, false} {
		t.Run(fmt.Sprintf("bound-by-us=%v", ours), func(t *testing.T) {
			f := newLoopFixture(t, Config{PartialGangGrace: time.Nanosecond}, gpuNode("a", 8))
			f.cache.upsertPodGroup(podGroup("g", 3))
			bound := newPod("ns", "g-0").GPUs(1).Label(v1alpha1.PodGroupLabel, "g").NodeName("a").Obj()
			if !ours {
				bound.Spec.SchedulerName = corev1.DefaultSchedulerName
			}
			f.cache.upsertPod(bound)
			f.cache.upsertPod(newPod("ns", "g-1").GPUs(8).Label(v1alpha1.PodGroupLabel, "g").Obj())
			f.cache.upsertPod(newPod("ns", "g-2").GPUs(8).Label(v1alpha1.PodGroupLabel, "g").Obj())
			f.cycle()
			f.cycle()
			if want := []string{"ns/g-0"}; ours != slices.Equal(f.api.deleted, want) || !ours && len(f.api.deleted) > 0 {
				t.Fatalf("deleted %v; bound by us %v", f.api.deleted, ours)
			}
		})
	}
}

func TestLoopReportsQueuesFromTheCore(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	f.cache.upsertQueue(build.Queue("team").GPUs("4", "").Obj())
	p := newPod("ns", "run").GPUs(2).Label(v1alpha1.QueueLabel, "team").NodeName("a").Obj()
	p.Annotations = map[string]string{GPUsAnnotation: "0,1"}
	f.cache.upsertPod(p)
	f.cycle()
	q, ok := f.status.statuses["queue/team"].(*v1alpha1.Queue)
	if !ok {
		t.Fatalf("no status for queue team: %v", f.status.statuses)
	}
	usage := q.Status.Usage[ResourceGPU]
	if usage.String() != "2" {
		t.Errorf("queue usage %v, want 2 GPUs", q.Status.Usage)
	}
}

// Every binding records the queue the pod's usage counts against, as the
// scheduler resolved it: the PodGroup's over the pod's label, the pod's
// label, the namespace's default queue otherwise.
func TestLoopRecordsTheQueueOnTheBinding(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	for _, q := range []string{"team", "gang-team", "ns-default"} {
		f.cache.upsertQueue(build.Queue(q).Obj())
	}
	f.cache.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns",
		Annotations: map[string]string{v1alpha1.DefaultQueueAnnotation: "ns-default"}}})
	labelled := newPod("ns", "labelled").GPUs(1).Label(v1alpha1.QueueLabel, "team").Obj()
	f.cache.upsertPod(labelled)
	f.cache.upsertPod(newPod("ns", "plain").GPUs(1).Obj())
	pg := podGroup("g", 2)
	pg.Spec.Queue = "gang-team"
	f.cache.upsertPodGroup(pg)
	for i := range 2 {
		m := newPod("ns", fmt.Sprint("g-", i)).GPUs(1).Label(v1alpha1.PodGroupLabel, "g").Label(v1alpha1.QueueLabel, "team").Obj()
		f.cache.upsertPod(m)
	}
	f.cycle()
	want := map[string]string{"ns/labelled": "team", "ns/plain": "ns-default", "ns/g-0": "gang-team", "ns/g-1": "gang-team"}
	if !maps.Equal(f.api.queues, want) {
		t.Errorf("bindings recorded queues %v, want %v", f.api.queues, want)
	}
}

// submitReplicaPods queues n pods of one nvidia.com/gpu.shared replica in
// queue team, runs a cycle and counts the binds per node.
func submitReplicaPods(f *loopFixture, n int) map[string]int {
	f.cache.upsertQueue(build.Queue("team").Obj())
	for i := range n {
		p := newPod("ns", fmt.Sprint("r-", i)).Limits(rl("nvidia.com/gpu.shared", "1")).Label(v1alpha1.QueueLabel, "team").Obj()
		f.cache.upsertPod(p)
	}
	f.cycle()
	on := map[string]int{}
	for _, b := range f.api.binds {
		on[strings.Fields(b)[1]]++
	}
	return on
}

// boundReplicaUsage shows the informer the binds of submitReplicaPods,
// runs the next cycle, which counts them as running, and returns queue
// team's GPU usage.
func boundReplicaUsage(t *testing.T, f *loopFixture) resource.Quantity {
	t.Helper()
	for _, b := range f.api.binds {
		fs := strings.Fields(b)
		ns, name, _ := strings.Cut(fs[0], "/")
		p := newPod(ns, name).Limits(rl("nvidia.com/gpu.shared", "1")).Label(v1alpha1.QueueLabel, "team").NodeName(fs[1]).Obj()
		p.Annotations = map[string]string{GPUsAnnotation: fs[2]}
		f.cache.upsertPod(p)
	}
	f.cycle()
	q, ok := f.status.statuses["queue/team"].(*v1alpha1.Queue)
	if !ok {
		t.Fatalf("no status for queue team: %v", f.status.statuses)
	}
	return q.Status.Usage[ResourceGPU]
}

// A shared replica is sized by the GPU it lands on: a node sharing its GPU
// 10 ways takes 10 one-replica pods beside one sharing 4 ways, and the
// queue counts what each pod's GPU gives (a tenth or a quarter).
func TestLoopSizesReplicasByTheirNode(t *testing.T) {
	shared := func(name string, replicas int) *corev1.Node {
		return build.Node(name).Resources(rl("nvidia.com/gpu.shared", fmt.Sprint(replicas), "cpu", "64", "memory", "256Gi")).Label("nvidia.com/gpu.replicas", fmt.Sprint(replicas)).Obj()
	}
	f := newLoopFixture(t, Config{}, shared("four", 4), shared("ten", 10))
	on := submitReplicaPods(f, 15)
	if on["four"] != 4 || on["ten"] != 10 {
		t.Fatalf("bound %v per node, want 4 on four and 10 on ten (binds %v)", on, f.api.binds)
	}
	if usage := boundReplicaUsage(t, f); usage.String() != "2" {
		t.Errorf("queue usage %v, want 2 GPUs (4 quarters and 10 tenths)", usage.String())
	}
}

// A node advertising nvidia.com/gpu.shared without nvidia.com/gpu.replicas
// takes as many one-replica pods as its allocatable says, as
// kube-scheduler admits them: 8 on a node of two GPUs (nvidia.com/gpu.count)
// sharing four ways each, 3 on a node without a GPU count, where each
// replica is a GPU's one. The queue counts what each pod's GPU gives.
func TestLoopPlacesReplicasWithoutTheReplicasLabel(t *testing.T) {
	counted := build.Node("counted").Resources(rl("nvidia.com/gpu.shared", "8", "cpu", "64", "memory", "256Gi")).Label(LabelGPUCount, "2").Obj()
	uncounted := build.Node("uncounted").Resources(rl("nvidia.com/gpu.shared", "3", "cpu", "64", "memory", "256Gi")).Obj()
	f := newLoopFixture(t, Config{}, counted, uncounted)
	on := submitReplicaPods(f, 12)
	if on["counted"] != 8 || on["uncounted"] != 3 {
		t.Fatalf("bound %v per node, want 8 on counted and 3 on uncounted (binds %v)", on, f.api.binds)
	}
	if usage := boundReplicaUsage(t, f); usage.String() != "5" {
		t.Errorf("queue usage %v, want 5 GPUs (8 quarters and 3 whole replicas)", usage.String())
	}
}

// Pods of another scheduler on a node time-sliced under nvidia.com/gpu
// hold the replicas the node gave them, not whole GPUs: GPU 0 has given
// three of its four replicas (one pod with one, one with two), so two
// half-GPU pods fit on GPU 1 and a third waits, saying that the node's
// nvidia.com/gpu shares are short. The waiting pod's condition names the
// resource it asks through.
func TestLoopCountsOtherSchedulersReplicasAsHeld(t *testing.T) {
	node := build.Node("ts").Resources(rl("nvidia.com/gpu", "8", "cpu", "64", "memory", "256Gi")).Label("nvidia.com/gpu.replicas", "4").Obj()
	f := newLoopFixture(t, Config{}, node)
	for name, rec := range map[string]struct{ gpus, held string }{"one": {"1", "0:250"}, "two": {"2", "0:500"}} {
		p := newPod("ns", name).Limits(rl("nvidia.com/gpu", rec.gpus)).Obj()
		p.Spec.SchedulerName, p.Spec.NodeName = corev1.DefaultSchedulerName, "ts"
		p.Annotations = map[string]string{HeldAnnotation: rec.held}
		f.cache.upsertPod(p)
	}
	for i := range 3 {
		f.cache.upsertPod(newPod("ns", fmt.Sprint("half-", i)).GPUs(1).Annotation("gpuplane.io/gpu-fraction", "0.5").Obj())
	}
	f.cycle()
	var on []string
	for _, b := range f.api.binds {
		on = append(on, strings.Fields(b)[2])
	}
	if !slices.Equal(on, []string{"1:500", "1:500"}) {
		t.Fatalf("half-GPU pods bound on %v (binds %v), want two on GPU 1", on, f.api.binds)
	}
	if got := f.status.conditions["ns/half-2"]; !strings.Contains(got, "insufficient nvidia.com/gpu") || strings.Contains(got, "gpu.shared") {
		t.Errorf("the third half's condition %q, want it short of nvidia.com/gpu shares", got)
	}
}

// Part of a GPU on a cluster whose nodes share none: the pod waits and
// says why; a fraction out of range is refused with the field named.
func TestLoopExplainsFractions(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	hami := newPod("ns", "hami").Limits(rl("nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000")).Obj()
	f.cache.upsertPod(hami)
	bad := newPod("ns", "bad").GPUs(1).Obj()
	bad.Annotations = map[string]string{"gpu-fraction": "1.5"}
	f.cache.upsertPod(bad)
	f.cycle()
	if len(f.api.binds) != 0 {
		t.Fatalf("bound %v on a node that shares no GPU", f.api.binds)
	}
	if got := f.status.conditions["ns/hami"]; !strings.Contains(got, "offer no GPU as shares") {
		t.Errorf("hami pod's condition %q, want it to say no node shares GPUs", got)
	}
	if got := f.status.conditions["ns/bad"]; !strings.Contains(got, "FractionOutOfRange") || !strings.Contains(got, "gpu-fraction") {
		t.Errorf("bad pod's condition %q, want FractionOutOfRange naming gpu-fraction", got)
	}
}

// A running pod that is being deleted (deletionTimestamp set) counts for
// no spread constraint from the cycle after its update on, while pod
// anti-affinity still sees it, as kube-scheduler's filters read it: the
// pod spreading web over zones waits while web runs in z0 and binds there
// once that pod is terminating; the one repelling web still waits.
func TestLoopTerminatingPodLeavesSpreadCounts(t *testing.T) {
	zoned := func(name, zone string) *corev1.Node {
		n := gpuNode(name, 8)
		n.Labels = map[string]string{"topology.kubernetes.io/zone": zone}
		return n
	}
	f := newLoopFixture(t, Config{}, zoned("a", "z0"), zoned("b", "z1"))
	web := build.Pod("ns", "web").NodeName("a").Label("app", "web").Request(corev1.ResourceCPU, "1").Obj()
	f.cache.upsertPod(web)
	spread := newPod("ns", "spread").Label("app", "web").Request(corev1.ResourceCPU, "1").Obj()
	spread.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "z0"}
	// Both zones count, though the pod goes only to z0.
	ignore := corev1.NodeInclusionPolicyIgnore
	spread.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
		WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, NodeAffinityPolicy: &ignore}}
	shy := newPod("ns", "shy").Request(corev1.ResourceCPU, "1").Obj()
	shy.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "z0"}
	shy.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		{TopologyKey: "topology.kubernetes.io/zone", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
	f.cache.upsertPod(spread)
	f.cache.upsertPod(shy)
	f.cycle()
	if len(f.api.binds) != 0 {
		t.Fatalf("binds %v while web runs in z0, want none", f.api.binds)
	}
	web = web.DeepCopy()
	web.DeletionTimestamp = &metav1.Time{Time: f.now}
	f.cache.upsertPod(web)
	f.cycle()
	if len(f.api.binds) != 1 || !strings.HasPrefix(f.api.binds[0], "ns/spread a") {
		t.Fatalf("binds %v, want ns/spread on a beside the terminating web pod, and ns/shy still waiting", f.api.binds)
	}
}
