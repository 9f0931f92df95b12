package adapter

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/go-logr/logr"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// fullPod is a pod as the API server returns it: every part a workload
// carries, most of which the scheduler never reads.
func fullPod(ns, name, node string) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	res := corev1.ResourceRequirements{Limits: rl("nvidia.com/gpu", "2", "cpu", "8", "memory", "32Gi", "rdma/hca", "1"),
		Requests: rl("nvidia.com/gpu", "2", "cpu", "8", "memory", "32Gi", "rdma/hca", "1")}
	container := func(n string) corev1.Container {
		return corev1.Container{Name: n, Image: "registry.example.com/team/trainer:2026.11.1", Command: []string{"torchrun", "--nproc-per-node=2"},
			Args: []string{"train.py", "--config", "/etc/train/config.yaml", "--epochs", "90"}, Resources: res,
			Env:          []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "MASTER_ADDR", Value: "trainer-0.trainer"}, {Name: "WORLD_SIZE", Value: "16"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "config", MountPath: "/etc/train"}}}
	}
	sidecar := container("log-shipper")
	sidecar.RestartPolicy = &always
	sidecar.Resources = corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi")}
	sidecar.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100, HostPort: 9100, Protocol: corev1.ProtocolTCP}}
	trainer := container("trainer")
	trainer.Ports = []corev1.ContainerPort{{Name: "nccl", ContainerPort: 29500, Protocol: corev1.ProtocolTCP},
		{Name: "rdzv", ContainerPort: 29400, HostPort: 29400, HostIP: "192.0.2.10", Protocol: corev1.ProtocolUDP}}
	prio := int32(1000)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "6c1e6ab0-0b4f-4b5e-9d3a-1f2e3d4c5b6a", ResourceVersion: "123456",
			CreationTimestamp: metav1.Unix(100, 0),
			Labels:            map[string]string{v1alpha1.PodGroupLabel: "trainer", v1alpha1.QueueLabel: "team-a", "app": "trainer"},
			Annotations:       map[string]string{GPUsAnnotation: "0,1", lastApplied: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `"}}`},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "trainer", UID: "abc"}},
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: metav1.NewFieldsV1(strings.Repeat("f", 2048))}}},
		Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, NodeName: node, Priority: &prio, PriorityClassName: "high",
			NodeSelector: map[string]string{"pool": "batch"},
			Tolerations:  []corev1.Toleration{{Key: "pool", Value: "batch", Effect: corev1.TaintEffectNoSchedule}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3"}}}}}}}},
			InitContainers: []corev1.Container{sidecar}, Containers: []corev1.Container{trainer},
			Overhead: rl("cpu", "250m"),
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "imagenet"}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "trainer"}}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3", HostIP: "192.0.2.10",
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "trainer", Image: "registry.example.com/team/trainer:2026.11.1", ImageID: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Ready: true,
				ContainerID: "containerd://0123456789abcdef0123456789abcdef", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Unix(200, 0)}}}}},
	}
}

func fullNode(name string) *corev1.Node {
	n := build.Node(name).Resources(rl("nvidia.com/gpu", "8", "cpu", "128", "memory", "2Ti", "rdma/hca", "8")).
		Label(LabelGPUProduct, "NVIDIA-H100-80GB-HBM3").Label(LabelGPUMemory, "81559").Label("pool", "batch").
		Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":8,"groups":[{"gpus":[0,1,2,3,4,5,6,7],"nvlinks":18}],"numa":[0,0,0,0,1,1,1,1]}`).
		Taint("pool", "batch", corev1.TaintEffectNoSchedule).Obj()
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", FieldsV1: metav1.NewFieldsV1(strings.Repeat("f", 4096))}}
	for i := range 40 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{fmt.Sprintf("registry.example.com/team/image-%d@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", i)}, SizeBytes: 1 << 30})
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

// TestForCacheKeepsWhatTheSchedulerReads: the scheduler's view of a pod
// and a node (request, predicate class, static fit, node model) is the
// same from the cached copy as from the full object, and what is dropped
// is gone.
func TestForCacheKeepsWhatTheSchedulerReads(t *testing.T) {
	pod, node := fullPod("ns", "p", "n"), fullNode("n")
	sp, _ := forCache(pod.DeepCopy())
	sn, _ := forCache(node.DeepCopy())
	slimP, slimN := sp.(*corev1.Pod), sn.(*corev1.Node)
	pending := pod.DeepCopy()
	pending.Spec.NodeName = ""
	sq, _ := forCache(pending.DeepCopy())
	slimQ := sq.(*corev1.Pod)

	for _, c := range []struct{ full, slim *corev1.Pod }{{pod, slimP}, {pending, slimQ}} {
		wantReq, err1 := podRequest(c.full, 1)
		gotReq, err2 := podRequest(c.slim, 1)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(wantReq, gotReq) {
			t.Errorf("podRequest = %+v, %v; from the full pod %+v, %v", gotReq, err2, wantReq, err1)
		}
		if len(wantReq.HostPorts) != 2 || wantReq.Scalars["rdma/hca"] != 1 {
			t.Errorf("podRequest of the full pod = %+v, want its two host ports and rdma/hca: 1", wantReq)
		}
		if usesShared(c.slim) != usesShared(c.full) {
			t.Errorf("usesShared = %t, from the full pod %t", usesShared(c.slim), usesShared(c.full))
		}
	}
	if classKey(slimQ) != classKey(pending) {
		t.Errorf("classKey differs:\n%s\n%s", classKey(slimQ), classKey(pending))
	}
	if got, want := staticFit(logr.Discard(), slimQ, slimN), staticFit(logr.Discard(), pending, node); got != want {
		t.Errorf("staticFit = %q, want %q", got, want)
	}
	if slimP.Spec.Affinity != nil || slimP.Spec.Tolerations != nil || slimP.Spec.NodeSelector != nil || slimP.Status.Conditions != nil {
		t.Error("a bound pod kept what only a waiting pod is read for (affinity, tolerations, node selector, conditions)")
	}
	wantNode, _, err1 := convertNode(node)
	gotNode, _, err2 := convertNode(slimN)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(wantNode.GPUs, gotNode.GPUs) || wantNode.MilliCPU != gotNode.MilliCPU || (gotNode.Topology == nil) != (wantNode.Topology == nil) {
		t.Errorf("convertNode = %+v, %v; from the full node %+v, %v", gotNode, err2, wantNode, err1)
	}
	// Informers may apply the transform twice (the streaming initial
	// list): the second application must neither change nor copy.
	if again, _ := forCache(slimP); again != any(slimP) {
		t.Error("the transform of a cached pod is not the pod itself: informers may apply it twice")
	}
	if again, _ := forCache(slimN); again != any(slimN) {
		t.Error("the transform of a cached node is not the node itself: informers may apply it twice")
	}
	if again, _ := forCache(slimP.DeepCopy()); !reflect.DeepEqual(again, slimP) {
		t.Error("the transform of a copy of a cached pod differs from the cached pod")
	}
	for what, gone := range map[string]bool{
		"pod managed fields":    len(slimP.ManagedFields) == 0,
		"pod last-applied":      slimP.Annotations[lastApplied] == "",
		"volumes but claims":    len(slimP.Spec.Volumes) == 1 && slimP.Spec.Volumes[0].PersistentVolumeClaim.ClaimName == "imagenet",
		"container statuses":    slimP.Status.ContainerStatuses == nil,
		"node images":           slimN.Status.Images == nil,
		"node managed fields":   len(slimN.ManagedFields) == 0,
		"kept: gpus annotation": slimP.Annotations[GPUsAnnotation] == "0,1",
		"kept: uid and version": slimP.UID == pod.UID && slimP.ResourceVersion == pod.ResourceVersion,
		"requests as overhead":  len(slimP.Spec.Containers) == 1 && slimP.Spec.Containers[0].Resources.Requests == nil && slimP.Spec.InitContainers == nil && slimP.Spec.Overhead.Name("nvidia.com/gpu", resource.DecimalSI).Value() == 2,
		"kept: host ports only": len(slimP.Spec.Containers) == 1 && len(slimP.Spec.Containers[0].Ports) == 2 && slimP.Spec.Containers[0].Image == "",
		"kept: phase":           slimP.Status.Phase == corev1.PodRunning,
		"kept: waiting's cond.": len(slimQ.Status.Conditions) == 1 && slimQ.Status.Conditions[0].Type == corev1.PodScheduled,
		"other annotations":     len(slimP.Annotations) == 1,
		"kept: node taints":     len(slimN.Spec.Taints) == 1,
	} {
		if !gone {
			t.Errorf("%s: not as it should be", what)
		}
	}
	if pod.Annotations[lastApplied] == "" || node.Status.Images == nil {
		t.Error("the transform changed the object it was given a copy of")
	}
	// Each annotation the scheduler reads survives the transform, the
	// dialects' group and queue annotations among them.
	read := slices.Clone(podAnnotations)
	for _, k := range slices.Concat(v1alpha1.GroupKeys, v1alpha1.QueueKeys) {
		if k.Annotation {
			read = append(read, k.Name)
		}
	}
	for _, k := range read {
		p := pod.DeepCopy()
		p.Annotations[k] = "v"
		if s, _ := forCache(p); s.(*corev1.Pod).Annotations[k] != "v" {
			t.Errorf("annotation %s was dropped", k)
		}
	}
}

// Pods of one workload share their labels, node selector and resource
// lists in the cache; a pod whose differ keeps its own, and no key or
// value can pass for another pair.
func TestForCacheSharesAlikeMaps(t *testing.T) {
	a, _ := forCache(fullPod("ns", "a", "n"))
	b, _ := forCache(fullPod("ns", "b", "n"))
	pa, pb := a.(*corev1.Pod), b.(*corev1.Pod)
	same := func(x, y any) bool { return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() }
	if !same(pa.Labels, pb.Labels) || !same(pa.Spec.Overhead, pb.Spec.Overhead) || !same(pa.Annotations, pb.Annotations) ||
		!same(pa.OwnerReferences, pb.OwnerReferences) {
		t.Error("two pods of one workload keep separate copies of alike maps")
	}
	c := fullPod("ns", "c", "n")
	c.Labels["app"] = "other"
	pc, _ := forCache(c)
	if same(pa.Labels, pc.(*corev1.Pod).Labels) || pc.(*corev1.Pod).Labels["app"] != "other" {
		t.Error("a pod with other labels got the shared ones")
	}
	// Waiting pods share their tolerations too, down to the seconds.
	w1, w2, w3 := fullPod("ns", "w1", ""), fullPod("ns", "w2", ""), fullPod("ns", "w3", "")
	secs := func(s int64) *int64 { return &s }
	for _, p := range []*corev1.Pod{w1, w2, w3} {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeNotReady,
			Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(300)})
	}
	w3.Spec.Tolerations[1].TolerationSeconds = secs(30)
	s1, _ := forCache(w1)
	s2, _ := forCache(w2)
	s3, _ := forCache(w3)
	t1, t2, t3 := s1.(*corev1.Pod).Spec.Tolerations, s2.(*corev1.Pod).Spec.Tolerations, s3.(*corev1.Pod).Spec.Tolerations
	if !same(t1, t2) {
		t.Error("two waiting pods of one workload keep separate copies of alike tolerations")
	}
	if same(t1, t3) || *t3[1].TolerationSeconds != 30 {
		t.Errorf("a pod tolerating for other seconds got the shared tolerations: %v", t3)
	}
	x := strMaps.intern(map[string]string{"a": "b1:c"})
	y := strMaps.intern(map[string]string{"a": "b", "c": ""})
	if same(x, y) {
		t.Error("two different maps were taken for one")
	}
}

// A pod whose containers fail a check that names the container keeps them,
// so that the refusal still names it.
func TestForCacheKeepsContainersARefusalNames(t *testing.T) {
	p := fullPod("ns", "p", "")
	p.Spec.Containers[0].Resources.Requests = rl("nvidia.com/gpu", "1", "cpu", "8")
	s, _ := forCache(p)
	_, err := podRequest(s.(*corev1.Pod), 1)
	var bad *BadInputError
	if !errors.As(err, &bad) || bad.Reason != "RequestsNotLimits" || !strings.Contains(bad.Msg, `"trainer"`) {
		t.Errorf("podRequest of the cached pod = %v, want RequestsNotLimits naming the container", err)
	}
}

// BenchmarkCacheMemory measures what the scheduler's cache holds for a
// cluster of 5,000 nodes and 40,000 pods as the API server returns them,
// with and without the cache transform.
func BenchmarkCacheMemory(b *testing.B) {
	const nodes, pods = 5000, 40000
	for _, slim := range []bool{false, true} {
		b.Run(fmt.Sprintf("transform=%v", slim), func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				c := newClusterCache(v1alpha1.SchedulerName)
				for i := range nodes {
					var obj any = fullNode(fmt.Sprintf("n-%d", i))
					if slim {
						obj, _ = forCache(obj)
					} else {
						obj.(*corev1.Node).ManagedFields = nil
					}
					c.upsertNode(obj.(*corev1.Node))
				}
				for i := range pods {
					var obj any = fullPod("ns", fmt.Sprintf("p-%d", i), fmt.Sprintf("n-%d", i%nodes))
					if slim {
						obj, _ = forCache(obj)
					} else {
						obj.(*corev1.Pod).ManagedFields = nil
					}
					c.upsertPod(obj.(*corev1.Pod))
				}
				b.ReportMetric(float64(heapInUse()-before)/(1<<20), "MiB")
				runtime.KeepAlive(c)
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
