package topology_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// The workloads here are made by the operators their users run them with
// (bin/operators, from `make operator-bins`): the JobSet controller, the
// training-operator, the LeaderWorkerSet controller, and kube-controller-
// manager for Indexed Jobs. No PodGroup is written except where a dialect
// has the user write one (gpuplane's, Volcano's); the scheduler derives each
// gang from the workload and reads its topology in the dialect written.

// Pod labels the operators give their pods, by which a test finds a pod's
// sub-group.
const (
	completionIndexLabel = "batch.kubernetes.io/job-completion-index"
	jobIndexLabel        = "jobset.sigs.k8s.io/job-index"
	replicaTypeLabel     = "training.kubeflow.org/replica-type"
	lwsGroupLabel        = "leaderworkerset.sigs.k8s.io/group-index"
	lwsWorkerLabel       = "leaderworkerset.sigs.k8s.io/worker-index"
	// caseLabel keeps a case's pods on its own nodes and finds them.
	caseLabel = "topology-case"
)

// Each case has a fabric of its own: blocks of racks of GB200 NVL72-like
// compute trays (4 GPUs each), each rack one NVLink domain, every rack's
// first tray half taken by a pod placed before the scheduler starts.
// Placement blind to the topology fills those half-taken trays first, one
// per rack, and so splits every gang below.
//
// Per case: 2 blocks of 2 racks of 2 trays of 4 GPUs, 2 GPUs taken on each
// rack's first tray. Free: 6 GPUs per rack, 12 per block.
const (
	fabricBlocks, fabricRacks, fabricTrays, trayGPUs, fillerGPUs = 2, 2, 2, 4, 2
)

// fabricNodes returns the nodes of case name: level labels with values
// unique to the case (a clique value as GPU Feature Discovery writes it,
// the fabric's cluster UUID and clique ID), labelled test-ns=ns and
// caseLabel=name.
func fabricNodes(ns, name string) []*corev1.Node {
	var nodes []*corev1.Node
	for b := range fabricBlocks {
		block := fmt.Sprintf("%s-b%d", name, b)
		for r := range fabricRacks {
			rack := fmt.Sprintf("%s-r%d", block, r)
			for n := range fabricTrays {
				nodes = append(nodes, framework.GPUNode(fmt.Sprintf("%s-n%d", rack, n)).GPUs(trayGPUs).Label("test-ns", ns).Label(caseLabel, name).
					Labels(map[string]string{blockKey: block, rackKey: rack, cliqueKey: "uuid-" + rack + ".1"}).Obj())
			}
		}
	}
	return nodes
}

// placement is what a case's pods must show once the scheduler is done.
type placement struct {
	// pods is how many pods the workload makes.
	pods int
	// same lists levels every pod of the gang shares one domain of.
	same []string
	// spans gives, per level, how many domains the pods must span: a
	// preferred level's fewest.
	spans map[string]int
	// sliceLevel and slice: each slice (pods with the same slice(p))
	// inside one domain of sliceLevel.
	sliceLevel string
	slice      func(p *corev1.Pod) string
	// waits, when set, says the gang cannot be placed: no pod is bound,
	// and each says all of these in its PodScheduled condition.
	waits []string
}

// opCase is one workload submitted through its operator in one dialect.
type opCase struct {
	name   string
	submit func(c *opCluster, name string)
	want   placement
	// last: submitted once the other cases are placed (a GroupingRule
	// changes how every workload of its kind is grouped).
	last bool
	// replace selects (a label selector within the case) the pod deleted
	// once the case is placed, whose replacement, made by the operator,
	// must keep want.
	replace string
}

// opCluster is the namespace, scheduler and Topologies the cases share.
type opCluster struct {
	*cluster
	ours, kai string
}

// template is a pod template of the case's GPU workers: this test's
// scheduler, the case's nodes, gpus GPUs each, with annotations and labels
// beside caseLabel.
func (c *opCluster) template(name string, gpus int, annotations map[string]string, labels ...map[string]string) map[string]any {
	p := c.pod("x").GPUs(gpus).Obj()
	tolerations := make([]any, 0, len(p.Spec.Tolerations))
	for _, tl := range p.Spec.Tolerations {
		tolerations = append(tolerations, map[string]any{"key": tl.Key, "operator": string(tl.Operator), "effect": string(tl.Effect)})
	}
	l := map[string]any{caseLabel: name}
	for _, m := range labels {
		for k, v := range m {
			l[k] = v
		}
	}
	meta := map[string]any{"labels": l}
	if len(annotations) > 0 {
		a := map[string]any{}
		for k, v := range annotations {
			a[k] = v
		}
		meta["annotations"] = a
	}
	return map[string]any{"metadata": meta, "spec": map[string]any{
		"schedulerName": c.scheduler,
		"restartPolicy": "Never",
		"nodeSelector":  map[string]any{"test-ns": c.ns, caseLabel: name},
		"tolerations":   tolerations,
		"containers": []any{map[string]any{"name": "worker", "image": framework.PauseImage,
			"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": strconv.Itoa(gpus)}}}},
	}}
}

// meta is a workload's metadata with annotations.
func (c *opCluster) meta(name string, annotations map[string]string) map[string]any {
	m := map[string]any{"name": name, "namespace": c.ns}
	if len(annotations) > 0 {
		a := map[string]any{}
		for k, v := range annotations {
			a[k] = v
		}
		m["annotations"] = a
	}
	return m
}

// indexedJob is an Indexed Job of n pods of gpus GPUs, every index at
// once, with podLabels on its pod template: kube-controller-manager makes
// its pods, and makes an index's pod again once if it is deleted (its
// backoff limit).
func (c *opCluster) indexedJob(name string, n int64, gpus int, jobAnn, podAnn map[string]string, podLabels ...map[string]string) {
	c.create(jobs, c.ns, map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": c.meta(name, jobAnn),
		"spec": map[string]any{"parallelism": n, "completions": n, "completionMode": "Indexed", "backoffLimit": int64(1),
			"template": c.template(name, gpus, podAnn, podLabels...)}})
}

// jobSet is a JobSet of one replicated Job: replicas Jobs of parallelism
// pods of gpus GPUs. The JobSet controller makes the Jobs.
func (c *opCluster) jobSet(name string, replicas, parallelism int64, gpus int, jsAnn, podAnn map[string]string) {
	c.create(framework.JobSets, c.ns, map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": c.meta(name, jsAnn),
		"spec": map[string]any{
			// What JobSet's defaulting webhook would set.
			"successPolicy": map[string]any{"operator": "All"},
			"startupPolicy": map[string]any{"startupPolicyOrder": "AnyOrder"},
			"network":       map[string]any{"enableDNSHostnames": true, "publishNotReadyAddresses": true},
			"replicatedJobs": []any{map[string]any{"name": "workers", "replicas": replicas,
				"template": map[string]any{"spec": map[string]any{
					"parallelism": parallelism, "completions": parallelism, "backoffLimit": int64(0),
					"completionMode": "Indexed", "template": c.template(name, gpus, podAnn)}}}},
		}})
}

// pyTorchJob is a PyTorchJob of one master and workers workers of gpus
// GPUs. The training-operator makes the pods.
func (c *opCluster) pyTorchJob(name string, workers int64, gpus int, jobAnn, podAnn map[string]string) {
	replica := func(n int64) map[string]any {
		tmpl := c.template(name, gpus, podAnn)
		tmpl["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["name"] = "pytorch"
		return map[string]any{"replicas": n, "restartPolicy": "Never", "template": tmpl}
	}
	c.create(framework.PyTorchJobs, c.ns, map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": c.meta(name, jobAnn),
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{"Master": replica(1), "Worker": replica(workers)}}})
}

// lws is a LeaderWorkerSet of replicas groups of size pods (a leader and
// its workers) of gpus GPUs. The LeaderWorkerSet controller makes the
// pods.
func (c *opCluster) lws(name string, replicas, size int64, gpus int, lwsAnn, podAnn map[string]string) {
	tmpl := c.template(name, gpus, podAnn)
	tmpl["spec"].(map[string]any)["restartPolicy"] = "Always" // a StatefulSet's pods
	env.CreateLeaderWorkerSet(c.t, c.dyn, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": c.meta(name, lwsAnn),
		// A pod deleted is made again alone, not with its whole group.
		"spec": map[string]any{"replicas": replicas, "leaderWorkerTemplate": map[string]any{"size": size, "workerTemplate": tmpl, "restartPolicy": "None"}},
	}})
}

// volcanoPodGroup is a Volcano PodGroup of minMember pods with
// networkTopology mode and tier, its tiers those of Topology topology.
func (c *opCluster) volcanoPodGroup(name, topology string, minMember int64, mode string, tier int64) {
	c.create(volcanoPodGroups, c.ns, map[string]any{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": c.ns, "annotations": map[string]any{v1alpha1.TopologyAnnotation: topology}},
		"spec":     map[string]any{"minMember": minMember, "networkTopology": map[string]any{"mode": mode, "highestTierAllowed": tier}}})
}

// The sub-group a slice check groups pods by.
func labelSlice(key string) func(p *corev1.Pod) string {
	return func(p *corev1.Pod) string { return p.Labels[key] }
}

func rankSlice(size int) func(p *corev1.Pod) string {
	return func(p *corev1.Pod) string {
		i, err := strconv.Atoi(p.Labels[completionIndexLabel])
		if err != nil {
			return "no index"
		}
		return strconv.Itoa(i / size)
	}
}

// newOpCluster makes the shared namespace, a gpuplane Topology (block,
// rack, NVLink domain, host) and a KAI one (rack, NVLink domain, host),
// starts the operators and each case's fabric, with its fillers bound,
// and then the scheduler.
func newOpCluster(t *testing.T, cases []string) *opCluster {
	t.Helper()
	c := &opCluster{cluster: newCluster(t, 0, 0, 0)}
	c.ours, c.kai = c.ns+"-net", c.ns+"-kai"
	c.createTyped(v1alpha1.TopologiesResource, "", build.Topology(c.ours, blockKey, rackKey, cliqueKey, hostKey))
	c.create(kaiTopologies, "", map[string]any{"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
		"metadata": map[string]any{"name": c.kai}, "spec": map[string]any{"levels": levels(rackKey, cliqueKey, hostKey)}})
	env.StartOperator(t, localcluster.OperatorJobSet)
	env.StartOperator(t, localcluster.OperatorTraining, "--enable-scheme=pytorchjob")
	env.StartLWS(t, c.ns)

	var nodes []*corev1.Node
	for _, name := range cases {
		nodes = append(nodes, fabricNodes(c.ns, name)...)
	}
	// newCluster's clean-up deletes them.
	if err := env.CreateNodes(t.Context(), nodes, 8); err != nil {
		t.Fatal(err)
	}
	env.WaitNodesReady(t, "test-ns="+c.ns, len(nodes), 90*time.Second)
	env.WaitNodesUntainted(t, "test-ns="+c.ns, 60*time.Second)
	fillers := 0
	for _, n := range nodes {
		if strings.HasSuffix(n.Name, "-n0") {
			c.createPod(c.pod("filler-"+n.Name).GPUs(fillerGPUs).NodeName(n.Name).Label("role", "filler").Obj())
			fillers++
		}
	}
	c.waitBound("role=filler", fillers)
	c.run()
	return c
}

// nodeLabels reads the test's nodes' labels from the API server.
func (c *opCluster) nodeLabels(ctx context.Context) (map[string]map[string]string, error) {
	list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "test-ns=" + c.ns})
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]string, len(list.Items))
	for _, n := range list.Items {
		out[n.Name] = n.Labels
	}
	return out, nil
}

// fabricLevels are the test's levels, widest first.
var fabricLevels = []string{blockKey, rackKey, cliqueKey, hostKey}

// domainOf names the domain of level key that a node with labels is in:
// its values from the widest level down to key, so that a rack's name
// reused in another block is another rack; "" for a node without key.
func domainOf(labels map[string]string, key string) string {
	var parts []string
	for _, l := range fabricLevels {
		v, ok := labels[l]
		if !ok {
			return ""
		}
		parts = append(parts, v)
		if l == key {
			break
		}
	}
	return strings.Join(parts, "/")
}

// check reports what of want the case's pods break, or "" when they show
// it; done says the pods are all made and, unless the gang waits, bound.
func (c *opCluster) check(ctx context.Context, name string, want placement, nodes map[string]map[string]string) (done bool, broken string, err error) {
	pods, err := c.pods(ctx, caseLabel+"="+name)
	if err != nil {
		return false, "", err
	}
	var bound []corev1.Pod
	var waiting []string
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound = append(bound, p)
		} else {
			waiting = append(waiting, p.Name+": "+framework.SchedulerSays(&p))
		}
	}
	where := func(ps []corev1.Pod, key string) map[string][]string {
		out := map[string][]string{}
		for _, p := range ps {
			d := domainOf(nodes[p.Spec.NodeName], key)
			out[d] = append(out[d], p.Name+"@"+p.Spec.NodeName)
		}
		return out
	}
	if len(want.waits) > 0 {
		if len(bound) > 0 {
			return false, fmt.Sprintf("%d pods bound (%v), want none: the gang cannot be placed", len(bound), where(bound, hostKey)), nil
		}
		if len(pods) < want.pods {
			return false, "", fmt.Errorf("%d of %d pods made", len(pods), want.pods)
		}
		for _, p := range pods {
			says := framework.SchedulerSays(&p)
			for _, w := range want.waits {
				if !strings.Contains(says, w) {
					return false, "", fmt.Errorf("pod %s says %q, want %q", p.Name, says, w)
				}
			}
		}
		return true, "", nil
	}
	// A required level is never violated, even by a gang still binding.
	for _, key := range want.same {
		if w := where(bound, key); len(w) > 1 {
			return false, fmt.Sprintf("pods in %d domains of %s, want one: %v", len(w), key, w), nil
		}
	}
	if len(pods) < want.pods || len(bound) < len(pods) {
		return false, "", fmt.Errorf("%d of %d pods bound (%d made); %s", len(bound), want.pods, len(pods), strings.Join(waiting, "; "))
	}
	if len(pods) != want.pods {
		return false, fmt.Sprintf("%d pods, want %d", len(pods), want.pods), nil
	}
	for _, key := range slices.Sorted(maps.Keys(want.spans)) {
		if w := where(bound, key); len(w) != want.spans[key] {
			return false, fmt.Sprintf("pods in %d domains of %s, want %d: %v", len(w), key, want.spans[key], w), nil
		}
	}
	if want.sliceLevel != "" {
		bySlice := map[string][]corev1.Pod{}
		for _, p := range bound {
			bySlice[want.slice(&p)] = append(bySlice[want.slice(&p)], p)
		}
		for s, ps := range bySlice {
			if w := where(ps, want.sliceLevel); len(w) != 1 {
				return false, fmt.Sprintf("slice %q in %d domains of %s, want one: %v", s, len(w), want.sliceLevel, w), nil
			}
		}
	}
	return true, "", nil
}

// Indexed Jobs, PyTorchJobs, JobSets and LeaderWorkerSets, made by their
// operators, placed through each dialect (Kueue's pod-template
// annotations, KAI's workload annotations, Volcano's networkTopology on
// the PodGroup the pods name, gpuplane's PodGroup and workload
// annotations) with required, preferred and sliced levels, on racks that
// are each one NVLink domain. Every case's fabric has a half-taken tray in
// each rack that placement blind to the topology fills first, which would
// split each gang across racks and blocks; a gang that no domain of its
// required level holds binds no pod and says which level. The placements
// are checked against the nodes' labels as the API server holds them.
func TestTopologyWorkloadsThroughOperators(t *testing.T) {
	kueue := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []opCase{
		// Indexed Jobs.
		{"job-kueue-nvl", func(c *opCluster, n string) {
			c.indexedJob(n, 3, 2, nil, kueue(v1alpha1.KueueRequiredTopologyAnnotation, cliqueKey))
		}, placement{pods: 3, same: []string{cliqueKey}}, false, ""},
		{"job-kueue-sliced", func(c *opCluster, n string) {
			c.indexedJob(n, 4, 2, nil, kueue(v1alpha1.KueueRequiredTopologyAnnotation, blockKey,
				v1alpha1.KueueSliceRequiredTopologyAnnotation, cliqueKey, v1alpha1.KueueSliceSizeAnnotation, "2"))
		}, placement{pods: 4, same: []string{blockKey}, sliceLevel: cliqueKey, slice: rankSlice(2)}, false, ""},
		// Slices of two ranks take a rack each of one block, leaving 2 GPUs
		// free in each. Index 0 deleted and made again (a pod of another
		// name) joins its slice's rack, where it left 4 GPUs free, not the
		// tighter rack of slice 1 that best fit would take for a pod alone.
		// Its pods keep running (kwok completes a Job's pods after the
		// delay their annotations give), so the Job makes index 0 again.
		{"job-kueue-slice-rejoin", func(c *opCluster, n string) {
			c.indexedJob(n, 4, 2, nil, kueue(v1alpha1.KueueRequiredTopologyAnnotation, blockKey,
				v1alpha1.KueueSliceRequiredTopologyAnnotation, rackKey, v1alpha1.KueueSliceSizeAnnotation, "2",
				"pod-complete.stage.kwok.x-k8s.io/delay", "1h", "pod-complete.stage.kwok.x-k8s.io/jitter-delay", "1h"))
		}, placement{pods: 4, same: []string{blockKey}, sliceLevel: rackKey, slice: rankSlice(2)}, false, completionIndexLabel + "=0"},
		{"job-kai-preferred", func(c *opCluster, n string) {
			c.indexedJob(n, 3, 2, kueue(v1alpha1.KAITopologyAnnotation, c.kai, v1alpha1.KAIPreferredPlacementAnnotation, rackKey), nil)
		}, placement{pods: 3, spans: map[string]int{rackKey: 1}}, false, ""},
		{"job-volcano-hard", func(c *opCluster, n string) {
			// Tier 2 of Topology ours is the rack (tier 1 the NVLink
			// domain).
			c.volcanoPodGroup(n, c.ours, 3, "hard", 2)
			c.indexedJob(n, 3, 2, nil, kueue(v1alpha1.VolcanoGroupAnnotation, n))
		}, placement{pods: 3, same: []string{rackKey}}, false, ""},
		{"job-podgroup", func(c *opCluster, n string) {
			c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, n, 3).
				Topology(v1alpha1.TopologyConstraint{Name: c.ours, Required: blockKey, Preferred: rackKey}).Obj())
			// The Job's pod template names the PodGroup by label.
			c.indexedJob(n, 3, 2, nil, nil, map[string]string{v1alpha1.PodGroupLabel: n})
		}, placement{pods: 3, same: []string{blockKey}, spans: map[string]int{rackKey: 1}}, false, ""},
		// JobSets.
		{"jobset-kueue-sliced", func(c *opCluster, n string) {
			// No slice size: each of the JobSet's Jobs is a slice.
			c.jobSet(n, 2, 2, 2, nil, kueue(v1alpha1.KueueRequiredTopologyAnnotation, blockKey, v1alpha1.KueueSliceRequiredTopologyAnnotation, rackKey))
		}, placement{pods: 4, same: []string{blockKey}, sliceLevel: rackKey, slice: labelSlice(jobIndexLabel)}, false, ""},
		{"jobset-kai-required", func(c *opCluster, n string) {
			c.jobSet(n, 3, 1, 2, kueue(v1alpha1.KAITopologyAnnotation, c.kai, v1alpha1.KAIRequiredPlacementAnnotation, rackKey), nil)
		}, placement{pods: 3, same: []string{rackKey}}, false, ""},
		{"jobset-volcano-soft", func(c *opCluster, n string) {
			c.volcanoPodGroup(n, c.ours, 3, "soft", 2)
			c.jobSet(n, 1, 3, 2, nil, kueue(v1alpha1.VolcanoGroupAnnotation, n))
		}, placement{pods: 3, spans: map[string]int{rackKey: 1}}, false, ""},
		{"jobset-ours-preferred", func(c *opCluster, n string) {
			// 8 GPUs: more than a rack has free, so two racks, of one
			// block.
			c.jobSet(n, 4, 1, 2, kueue(v1alpha1.TopologyAnnotation, c.ours, v1alpha1.TopologyPreferredAnnotation, rackKey), nil)
		}, placement{pods: 4, spans: map[string]int{rackKey: 2, blockKey: 1}}, false, ""},
		{"jobset-kueue-unmet", func(c *opCluster, n string) {
			c.jobSet(n, 2, 2, 2, nil, kueue(v1alpha1.KueueRequiredTopologyAnnotation, cliqueKey))
		}, placement{pods: 4, waits: []string{"no NVLink domain (" + cliqueKey + ") has room for the gang's 4 pods", "has room for 3"}}, false, ""},
		// PyTorchJobs.
		{"pytorch-kueue-preferred", func(c *opCluster, n string) {
			c.pyTorchJob(n, 2, 2, nil, kueue(v1alpha1.KueuePreferredTopologyAnnotation, rackKey))
		}, placement{pods: 3, spans: map[string]int{rackKey: 1}}, false, ""},
		{"pytorch-kai-nvl", func(c *opCluster, n string) {
			c.pyTorchJob(n, 2, 2, kueue(v1alpha1.KAITopologyAnnotation, c.kai, v1alpha1.KAIRequiredPlacementAnnotation, cliqueKey), nil)
		}, placement{pods: 3, same: []string{cliqueKey}}, false, ""},
		{"pytorch-ours-sliced", func(c *opCluster, n string) {
			// The master and the workers are the slices: the three
			// workers fill one rack's free GPUs.
			c.pyTorchJob(n, 3, 2, kueue(v1alpha1.TopologyAnnotation, c.ours, v1alpha1.TopologyRequiredAnnotation, blockKey,
				v1alpha1.TopologySliceRequiredAnnotation, rackKey), nil)
		}, placement{pods: 4, same: []string{blockKey}, sliceLevel: rackKey, slice: labelSlice(replicaTypeLabel)}, false, ""},
		{"pytorch-kai-unmet", func(c *opCluster, n string) {
			c.pyTorchJob(n, 3, 2, kueue(v1alpha1.KAITopologyAnnotation, c.kai, v1alpha1.KAIRequiredPlacementAnnotation, rackKey), nil)
		}, placement{pods: 4, waits: []string{"no rack (" + rackKey + ") has room for the gang's 4 pods", "has room for 3"}}, false, ""},
		// LeaderWorkerSets: a gang per group, as the shipped rule makes.
		{"lws-kueue-required", func(c *opCluster, n string) {
			c.lws(n, 2, 2, 2, nil, kueue(v1alpha1.KueueRequiredTopologyAnnotation, rackKey))
		}, placement{pods: 4, sliceLevel: rackKey, slice: labelSlice(lwsGroupLabel)}, false, ""},
		{"lws-kai-preferred", func(c *opCluster, n string) {
			c.lws(n, 1, 3, 2, kueue(v1alpha1.KAITopologyAnnotation, c.kai, v1alpha1.KAIPreferredPlacementAnnotation, cliqueKey), nil)
		}, placement{pods: 3, spans: map[string]int{cliqueKey: 1}}, false, ""},
		// A GroupingRule that makes a whole LeaderWorkerSet one gang, in one
		// block, each of its groups (the sub-groups) in one rack: two groups
		// of three pods of 2 GPUs fill one block's free GPUs, a rack's each.
		{"lws-rule-sliced", func(c *opCluster, n string) {
			c.groupingRule(n, v1alpha1.GroupingRuleSpec{
				Target:    v1alpha1.GroupKind{Group: "leaderworkerset.x-k8s.io", Kind: "LeaderWorkerSet"},
				MinMember: "object.spec.?replicas.orValue(1) * object.spec.leaderWorkerTemplate.?size.orValue(1)",
				Topology:  &v1alpha1.TopologyConstraint{Name: c.ours, Required: blockKey, SliceRequired: rackKey},
			})
			c.lws(n, 2, 3, 2, nil, nil)
		}, placement{pods: 6, same: []string{blockKey}, sliceLevel: rackKey, slice: labelSlice(lwsGroupLabel)}, true, ""},
		// Under the same rule, two groups of two pods of 2 GPUs take a rack
		// each of one block, leaving 2 GPUs free in each. A worker of group
		// 0 deleted and made again joins its group's rack, where it left 4
		// GPUs free, not the tighter rack of group 1 that best fit would
		// take for a pod alone.
		{"lws-rule-rejoin", func(c *opCluster, n string) {
			c.lws(n, 2, 2, 2, nil, nil)
		}, placement{pods: 4, same: []string{blockKey}, sliceLevel: rackKey, slice: labelSlice(lwsGroupLabel)}, true, lwsGroupLabel + "=0," + lwsWorkerLabel + "=1"},
	}
	var names []string
	for _, tc := range cases {
		names = append(names, tc.name)
	}
	c := newOpCluster(t, names)
	for _, last := range []bool{false, true} {
		for _, tc := range cases {
			if tc.last == last {
				tc.submit(c, tc.name)
			}
		}
		for _, tc := range cases {
			if tc.last == last {
				c.verify(t, tc.name, tc)
			}
		}
	}
	for _, tc := range cases {
		if tc.replace == "" {
			continue
		}
		sel := caseLabel + "=" + tc.name + "," + tc.replace
		old := c.onePod(sel)
		if err := env.Client.CoreV1().Pods(c.ns).Delete(t.Context(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "pod "+sel+" made again", func(ctx context.Context) (bool, error) {
			ps, err := c.pods(ctx, sel)
			if err != nil {
				return false, err
			}
			if len(ps) != 1 || ps[0].UID == old.UID {
				return false, fmt.Errorf("%d pods, want one, not the deleted pod %s", len(ps), old.Name)
			}
			return true, nil
		})
		c.verify(t, tc.name+"-replaced", tc)
	}
	// The gangs that wait have been looked at in every cycle since: still
	// none of their pods is bound.
	nodes, err := c.nodeLabels(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if len(tc.want.waits) == 0 {
			continue
		}
		if done, broken, err := c.check(t.Context(), tc.name, tc.want, nodes); !done {
			t.Errorf("case %s at the end: %s%v", tc.name, broken, err)
		}
	}
}

// verify waits, in subtest title, until case tc's pods show its
// placement, and fails at once if they break it.
func (c *opCluster) verify(t *testing.T, title string, tc opCase) {
	t.Helper()
	t.Run(title, func(t *testing.T) {
		framework.Eventually(t, 120*time.Second, "case "+tc.name+" placed as asked", func(ctx context.Context) (bool, error) {
			nodes, err := c.nodeLabels(ctx)
			if err != nil {
				return false, err
			}
			done, broken, err := c.check(ctx, tc.name, tc.want, nodes)
			if broken != "" {
				t.Fatal(broken)
			}
			return done, err
		})
	})
}

// groupingRule creates a GroupingRule, deleted when the test ends, and
// waits until the scheduler says it is valid: from then on it groups the
// workloads of its kind.
func (c *opCluster) groupingRule(name string, spec v1alpha1.GroupingRuleSpec) {
	c.t.Helper()
	c.createTyped(v1alpha1.GroupingRulesResource, "", &v1alpha1.GroupingRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "GroupingRule"},
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	framework.Eventually(c.t, 60*time.Second, "GroupingRule "+name+" valid", func(ctx context.Context) (bool, error) {
		u, err := c.dyn.Resource(v1alpha1.GroupingRulesResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, x := range conds {
			if m, ok := x.(map[string]any); ok && m["type"] == v1alpha1.ConditionValid {
				return m["status"] == string(metav1.ConditionTrue), fmt.Errorf("Valid %v: %v", m["status"], m["message"])
			}
		}
		return false, fmt.Errorf("no Valid condition in %v", conds)
	})
}

// onePod is the test's one pod that selector selects.
func (c *opCluster) onePod(selector string) corev1.Pod {
	c.t.Helper()
	ps, err := c.pods(c.t.Context(), selector)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(ps) != 1 {
		c.t.Fatalf("%d pods %q, want one", len(ps), selector)
	}
	return ps[0]
}
