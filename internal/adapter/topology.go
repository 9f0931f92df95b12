package adapter

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// The Topology objects of the other schedulers that gpuplane-scheduler reads
// as its own where the cluster serves them: Kueue's (v1beta2, else
// v1beta1) and KAI's, both spec.levels[].nodeLabel, widest first.
var (
	KueueTopologiesV1beta2 = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"}
	KueueTopologiesV1beta1 = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta1", Resource: "topologies"}
	KAITopologies          = schema.GroupVersionResource{Group: "kai.scheduler", Version: "v1alpha1", Resource: "topologies"}
)

// Where a Topology comes from, in the order a name is looked up.
const (
	topoGpuplane = iota
	topoKueue
	topoKAI
	topoSources
)

var topoSourceNames = [topoSources]string{"Topology", "Kueue Topology", "KAI Topology"}

// DefaultTopologyName is the Topology a gang that names none is placed by
// when the cluster has several (Volcano's tiers; a level key found in
// several Topologies).
const DefaultTopologyName = "default"

// topologyBook holds the cluster's Topology objects, gpuplane's, Kueue's
// and KAI's, as their levels: read by the snapshot builder and, for
// Volcano's tiers, by the grouper, under a lock of its own.
type topologyBook struct {
	mu sync.Mutex
	// levels by source and name; a Topology whose levels mean nothing
	// has bad set instead.
	levels [topoSources]map[string][]string
	bad    [topoSources]map[string]string
	// version is bumped on every change.
	version int
}

func newTopologyBook() *topologyBook {
	b := &topologyBook{}
	for i := range b.levels {
		b.levels[i], b.bad[i] = map[string][]string{}, map[string]string{}
	}
	return b
}

// put records a Topology's levels, or why they mean nothing.
func (b *topologyBook) put(src int, name string, levels []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.levels[src], name)
	delete(b.bad[src], name)
	gt := model.GangTopology{Levels: levels}
	if err := gt.Check("spec"); err != nil {
		b.bad[src][name] = err.Error()
	} else {
		b.levels[src][name] = levels
	}
	b.version++
}

func (b *topologyBook) remove(src int, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.levels[src], name)
	delete(b.bad[src], name)
	b.version++
}

// upsertTopology takes gpuplane's Topology in (the informer's handler).
func (c *clusterCache) upsertTopology(t *v1alpha1.Topology) {
	levels := make([]string, len(t.Spec.Levels))
	for i, l := range t.Spec.Levels {
		levels[i] = l.NodeLabel
	}
	c.topologies.put(topoGpuplane, t.Name, levels)
	c.poke()
}

func (c *clusterCache) deleteTopology(t *v1alpha1.Topology) {
	c.topologies.remove(topoGpuplane, t.Name)
	c.poke()
}

// foreignTopology returns the handlers of Kueue's or KAI's Topology
// objects (src), read from unstructured JSON: spec.levels[].nodeLabel.
func (c *clusterCache) foreignTopology(src int) (upsert, remove func(*unstructured.Unstructured)) {
	upsert = func(u *unstructured.Unstructured) {
		c.topologies.put(src, u.GetName(), foreignLevels(u.Object))
		c.poke()
	}
	remove = func(u *unstructured.Unstructured) {
		c.topologies.remove(src, u.GetName())
		c.poke()
	}
	return upsert, remove
}

// foreignLevels reads spec.levels[].nodeLabel of a Kueue or KAI Topology;
// what is not a string is an empty level, which the book refuses.
func foreignLevels(obj map[string]any) []string {
	spec, _ := obj["spec"].(map[string]any)
	raw, _ := spec["levels"].([]any)
	if len(raw) > model.MaxTopologyLevels {
		// Refused by the book; not worth copying.
		raw = raw[:model.MaxTopologyLevels+1]
	}
	out := make([]string, len(raw))
	for i, l := range raw {
		m, _ := l.(map[string]any)
		out[i], _ = m["nodeLabel"].(string)
	}
	return out
}

// Levels returns the levels of the Topology of that name (gpuplane's, else
// Kueue's, else KAI's), or with name "" of the cluster's Topology: its
// only one, else the one named DefaultTopologyName; and the name it was
// found under. Its errors say what to create or name. It answers the
// grouper (grouper.TopologyLevels).
func (b *topologyBook) Levels(name string) (string, []string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if name == "" {
		n := 0
		for src := range topoSources {
			for tn := range b.levels[src] {
				n++
				name = tn
			}
		}
		switch {
		case n == 0:
			return "", nil, fmt.Errorf("the cluster has no Topology: create one (scheduling.gpuplane.io/v1alpha1 Topology) listing its levels' node labels, widest first")
		case n > 1:
			name = DefaultTopologyName
			if _, _, err := b.byNameLocked(name); err != nil {
				return "", nil, fmt.Errorf("the cluster has %d Topologies and none is named %q: name one with the annotation %s", n, DefaultTopologyName, v1alpha1.TopologyAnnotation)
			}
		}
	}
	_, levels, err := b.byNameLocked(name)
	return name, levels, err
}

func (b *topologyBook) byNameLocked(name string) (string, []string, error) {
	for src := range topoSources {
		if l, ok := b.levels[src][name]; ok {
			return topoSourceNames[src] + " " + name, l, nil
		}
	}
	for src := range topoSources {
		if why, ok := b.bad[src][name]; ok {
			return "", nil, fmt.Errorf("%s %s is invalid: %s", topoSourceNames[src], name, why)
		}
	}
	return "", nil, fmt.Errorf("topology %q does not exist: create a Topology named %q or name an existing one", name, name)
}

// resolve turns a gang's topology constraint into the core's: the levels
// of the Topology it names; else of the first Topology (gpuplane's, by
// name, then Kueue's, then KAI's) that has every level it names; else the
// levels it names, widest first as written (a required key alone works
// without any Topology). field names where the constraint was written, for
// the error, which says what to change.
func (b *topologyBook) resolve(tc *v1alpha1.TopologyConstraint, field string) (*model.GangTopology, error) {
	if err := tc.Check(field); err != nil {
		return nil, err
	}
	gt := &model.GangTopology{Required: tc.Required, Preferred: tc.Preferred, SliceRequired: tc.SliceRequired, SliceSize: int(tc.SliceSize)}
	keys := slices.DeleteFunc([]string{tc.Required, tc.Preferred, tc.SliceRequired}, func(k string) bool { return k == "" })
	if tc.Name != "" {
		b.mu.Lock()
		desc, levels, err := b.byNameLocked(tc.Name)
		b.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("%s.name: %w", field, err)
		}
		gt.Name, gt.Levels = desc, levels
	} else {
		b.mu.Lock()
	found:
		for src := range topoSources {
			names := make([]string, 0, len(b.levels[src]))
			for n := range b.levels[src] {
				names = append(names, n)
			}
			slices.SortFunc(names, func(x, y string) int {
				// The default first, then by name.
				return cmp.Or(-cmp.Compare(boolInt(x == DefaultTopologyName), boolInt(y == DefaultTopologyName)), strings.Compare(x, y))
			})
			for _, n := range names {
				l := b.levels[src][n]
				if !slices.ContainsFunc(keys, func(k string) bool { return !slices.Contains(l, k) }) {
					gt.Name, gt.Levels = topoSourceNames[src]+" "+n, l
					break found
				}
			}
		}
		b.mu.Unlock()
		if gt.Levels == nil {
			var levels []string
			for _, k := range keys {
				if !slices.Contains(levels, k) {
					levels = append(levels, k)
				}
			}
			gt.Name, gt.Levels = "label "+keys[0], levels
		}
	}
	if err := gt.Check(field); err != nil {
		if tc.Name != "" {
			return nil, fmt.Errorf("%w (%s)", err, gt.Name)
		}
		return nil, err
	}
	return gt, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Pod labels that say which sub-group of its workload a pod is in, the
// slices of a gang sliced without a size: a JobSet's Job, a LeaderWorkerSet
// group, a PyTorchJob's replica type.
const (
	jobSetReplicatedJobLabel = "jobset.sigs.k8s.io/replicatedjob-name"
	jobSetJobIndexLabel      = "jobset.sigs.k8s.io/job-index"
	lwsGroupIndexLabel       = "leaderworkerset.sigs.k8s.io/group-index"
	kubeflowReplicaTypeLabel = "training.kubeflow.org/replica-type"
)

// podSlice names the sub-group of its workload pod p is in, "" for none.
func podSlice(p *corev1.Pod) string {
	l := p.Labels
	switch {
	case l[jobSetReplicatedJobLabel] != "":
		return "jobset:" + l[jobSetReplicatedJobLabel] + "/" + l[jobSetJobIndexLabel]
	case l[lwsGroupIndexLabel] != "":
		return "lws:" + l[lwsGroupIndexLabel]
	case l[kubeflowReplicaTypeLabel] != "":
		return "kubeflow:" + strings.ToLower(l[kubeflowReplicaTypeLabel])
	}
	return ""
}

// Pod labels that give a pod's rank within its workload, by which a gang
// sliced by size is ordered so that each slice holds consecutive ranks.
var rankLabels = []string{"batch.kubernetes.io/job-completion-index", "training.kubeflow.org/replica-index", "leaderworkerset.sigs.k8s.io/worker-index"}

// podRank returns the pod's rank in its workload, -1 for none.
func podRank(p *corev1.Pod) int {
	for _, k := range rankLabels {
		if v, ok := p.Labels[k]; ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}

// sliceName names the slice pod p of a gang is in (model.Pod.Slice,
// model.Allocation.Slice) when the gang is sliced sliceSize pods at a
// time: its sub-group for slices by sub-group (0); for slices of a size,
// its sub-group and its rank's slice within it, so that a pod made again
// for a rank joins its slice's running pods, and "" for a pod without a
// rank (the core then counts the slices in pending order).
func sliceName(p *corev1.Pod, sliceSize int) string {
	if sliceSize <= 0 {
		return podSlice(p)
	}
	r := podRank(p)
	if r < 0 {
		return ""
	}
	return podSlice(p) + "#" + strconv.Itoa(r/sliceSize)
}

// groupTopology works out a pending group's topology: its PodGroup's
// spec.topology, else what its members' annotations say (podInfo.topo),
// resolved against the cluster's Topologies. On a PodGroup the scheduler
// derived, the members' annotations (Kueue's, on a workload's pod
// templates) come first: its spec.topology is the workload's default (the
// workload's own annotations, else its GroupingRule's). Members that say
// different things make the group wait, as does a constraint that means
// nothing; the error names the field. nil, nil for a group placed
// anywhere.
func (c *clusterCache) groupTopology(g *groupInfo, members map[string]*podInfo) (*model.GangTopology, *BadInputError) {
	tc, field, bad := groupConstraint(g, members)
	if tc == nil {
		return nil, bad
	}
	gt, err := c.topologies.resolve(tc, field)
	if err != nil {
		return nil, badInput("InvalidTopology", "%v", err)
	}
	if gt.SliceRequired != "" && gt.SliceSize == 0 {
		for _, pi := range g.pending {
			if podSlice(pi.pod) == "" {
				return nil, badInput("InvalidTopology", "%s: sliceRequired %q without a slice size places each sub-group of a workload (a JobSet's Job, a LeaderWorkerSet group, a PyTorchJob's replica type) in one domain, but pod %s belongs to none: set the slice size (sliceSize, %s or %s)",
					field, gt.SliceRequired, pi.key, v1alpha1.TopologySliceSizeAnnotation, v1alpha1.KueueSliceSizeAnnotation)
			}
		}
	}
	return gt, nil
}

// groupConstraint is the topology constraint a group states, as
// groupTopology reads it, and field, where it is written; nil for none or
// for members that say different things (then with the error).
func groupConstraint(g *groupInfo, members map[string]*podInfo) (*v1alpha1.TopologyConstraint, string, *BadInputError) {
	// The member with the least key decides, as for the queue.
	var first *podInfo
	for _, m := range members {
		if m.topo != nil && !m.terminal() && (first == nil || m.key < first.key) {
			first = m
		}
	}
	var tc *v1alpha1.TopologyConstraint
	field := ""
	switch derived := g.pg != nil && g.pg.Labels[v1alpha1.DerivedLabel] == "true"; {
	case g.pg != nil && !g.pg.Spec.Topology.IsZero() && (!derived || first == nil):
		tc, field = g.pg.Spec.Topology, "PodGroup "+g.pgKey+": spec.topology"
	case first == nil:
		return nil, "", nil
	default:
		for _, m := range members {
			if m.topo != nil && !m.terminal() && *m.topo != *first.topo {
				return nil, "", badInput("TopologyMismatch", "the pods of group %s ask for different topologies: pod %s asks %s, pod %s asks %s; give every pod the same topology annotations",
					strings.TrimPrefix(g.name, "pg/"), first.key, describeConstraint(first.topo), m.key, describeConstraint(m.topo))
			}
		}
		tc, field = first.topo, "pod "+first.key+": annotations"
	}
	return tc, field, nil
}

// describeConstraint is a constraint for a message.
func describeConstraint(tc *v1alpha1.TopologyConstraint) string {
	var parts []string
	for _, f := range []struct{ k, v string }{{"topology", tc.Name}, {"required", tc.Required}, {"preferred", tc.Preferred}, {"sliceRequired", tc.SliceRequired}} {
		if f.v != "" {
			parts = append(parts, f.k+" "+f.v)
		}
	}
	if tc.SliceSize > 0 {
		parts = append(parts, "sliceSize "+strconv.Itoa(int(tc.SliceSize)))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// foreignTopologySource says which of the other schedulers' Topology
// kinds group and kind name.
func foreignTopologySource(group, kind string) (int, bool) {
	switch {
	case kind != "Topology":
	case group == KueueTopologiesV1beta2.Group:
		return topoKueue, true
	case group == KAITopologies.Group:
		return topoKAI, true
	}
	return 0, false
}

type foreignTopologyResource struct {
	src int
	gvr schema.GroupVersionResource
}

// foreignTopologyResources are the other schedulers' Topology resources
// the API server serves, of the sources for which want is true: Kueue's
// newest served version, and KAI's.
func foreignTopologyResources(ctx context.Context, disc discovery.DiscoveryInterface, want func(src int) bool, log logr.Logger) []foreignTopologyResource {
	var out []foreignTopologyResource
	serves := func(gvr schema.GroupVersionResource) bool {
		if ctx.Err() != nil {
			return false
		}
		list, err := disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err != nil {
			if !apierrors.IsNotFound(err) {
				log.Info("could not look up a Topology resource; its Topologies are not read until it can be", "resource", gvr.String(), "err", err.Error())
			}
			return false
		}
		return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gvr.Resource })
	}
	if want(topoKueue) {
		for _, gvr := range []schema.GroupVersionResource{KueueTopologiesV1beta2, KueueTopologiesV1beta1} {
			if serves(gvr) {
				out = append(out, foreignTopologyResource{topoKueue, gvr})
				break
			}
		}
	}
	if want(topoKAI) && serves(KAITopologies) {
		out = append(out, foreignTopologyResource{topoKAI, KAITopologies})
	}
	for _, f := range out {
		log.Info("reading another scheduler's Topologies", "resource", f.gvr.String())
	}
	return out
}

// foreignTopologyWatch starts the informers of Kueue's and KAI's Topology
// resources as the API server comes to serve them: those served at start
// with the scheduler's other informers, those whose CRD is installed later
// once a re-check of the API server's discovery finds them.
type foreignTopologyWatch struct {
	c       *clusterCache
	disc    discovery.DiscoveryInterface
	factory dynamicinformer.DynamicSharedInformerFactory
	log     logr.Logger
	// read says which sources have an informer.
	read [topoSources]bool
}

// informerReg is an informer and the handler that feeds the cache from
// it.
type informerReg struct {
	inf cache.SharedIndexInformer
	h   cache.ResourceEventHandler
}

// look finds the sources newly served and returns their informers, not yet
// started, with the cache's handlers.
func (w *foreignTopologyWatch) look(ctx context.Context) []informerReg {
	var out []informerReg
	for _, f := range foreignTopologyResources(ctx, w.disc, func(src int) bool { return !w.read[src] }, w.log) {
		w.read[f.src] = true
		upsert, remove := w.c.foreignTopology(f.src)
		out = append(out, informerReg{w.factory.ForResource(f.gvr).Informer(), handler(upsert, remove)})
	}
	return out
}

// missing says whether a source is not read yet.
func (w *foreignTopologyWatch) missing() bool {
	return !w.read[topoKueue] || !w.read[topoKAI]
}

// run looks again every interval until every source is read or ctx ends,
// starting the informers of those it finds; the cache is told once each
// has handed over its objects.
func (w *foreignTopologyWatch) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for w.missing() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		regs := w.look(ctx)
		if len(regs) == 0 {
			continue
		}
		synced := make([]cache.InformerSynced, 0, len(regs))
		for _, r := range regs {
			reg, err := r.inf.AddEventHandler(r.h)
			if err != nil {
				w.log.Error(err, "registering a Topology informer's handler; its Topologies are not read")
				continue
			}
			synced = append(synced, reg.HasSynced)
		}
		w.factory.Start(ctx.Done())
		if cache.WaitForCacheSync(ctx.Done(), synced...) {
			w.c.poke()
		}
	}
}
