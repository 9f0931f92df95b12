package adapter

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// newPod is a pod for gpuplane-scheduler, created at Unix second 100.
func newPod(ns, name string) *build.PodBuilder {
	return build.Pod(ns, name).SchedulerName(v1alpha1.SchedulerName).Created(100)
}

func TestPodRequest(t *testing.T) {
	tests := []struct {
		name       string
		pod        *corev1.Pod
		replicas   int
		want       model.Request
		wantReason string
	}{
		{name: "whole GPUs with cpu and memory", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu", "2", "cpu", "1500m", "memory", "3Gi")).Obj(),
			want: model.Request{GPUs: 2, Replicas: 2, ShareResource: "nvidia.com/gpu", MilliCPU: 1500, MemoryMiB: 3072}},
		{name: "other resources in the node's unit, zero ones left out", pod: newPod("ns", "p").Limits(rl("ephemeral-storage", "10Gi", "hugepages-2Mi", "1Gi", "rdma/hca", "2", "example.com/zero", "0")).Obj(),
			want: model.Request{Scalars: map[string]int64{"ephemeral-storage": 10 << 30, "hugepages-2Mi": 1 << 30, "rdma/hca": 2}}},
		{name: "other resources: the larger of an init container and the containers' sum, plus overhead", pod: withOverhead(withInit(newPod("ns", "p").Limits(rl("ephemeral-storage", "1Gi")).Obj(),
			corev1.Container{Name: "init", Resources: corev1.ResourceRequirements{Requests: rl("ephemeral-storage", "3Gi", "rdma/hca", "1")}}), rl("ephemeral-storage", "1Gi")),
			want: model.Request{Scalars: map[string]int64{"ephemeral-storage": 4 << 30, "rdma/hca": 1}}},
		{name: "host ports of the containers and sidecars, not of init containers", pod: withInit(newPod("ns", "p").HostPort(7777).Obj(),
			corev1.Container{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 1, HostPort: 1}}},
			corev1.Container{Name: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 53, HostIP: "10.0.0.1", Protocol: corev1.ProtocolUDP}, {ContainerPort: 80}}}),
			want: model.Request{HostPorts: []model.HostPort{{Protocol: "UDP", IP: "10.0.0.1", Port: 53}, {Protocol: "TCP", IP: "0.0.0.0", Port: 7777}}}},
		{name: "a resource beyond any node is refused", pod: newPod("ns", "p").Limits(rl("ephemeral-storage", "2Ei")).Obj(), wantReason: "RequestOutOfRange"},
		{name: "a host port of an unknown protocol is refused", pod: withInit(newPod("ns", "p").Obj(), corev1.Container{Name: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80, Protocol: "QUIC"}}}), wantReason: "InvalidHostPort"},
		{name: "a shared GPU replica is a share of one GPU", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu.shared", "1")).Obj(), replicas: 4,
			want: model.Request{GPUMilli: 250, Replicas: 1, ShareResource: "nvidia.com/gpu.shared"}},
		{name: "gpuplane's fraction and memory", pod: newPod("ns", "p").GPUs(1).Annotation("gpuplane.io/gpu-fraction", "0.46").Annotation("gpuplane.io/gpu-memory", "20Gi").Obj(),
			want: model.Request{GPUMilli: 460, GPUMemoryMiB: 20480, ShareResource: "nvidia.com/gpu"}},
		{name: "gpuplane's fraction through nvidia.com/gpu.shared", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu.shared", "1")).Annotation("gpuplane.io/gpu-fraction", "0.25").Obj(), replicas: 4,
			want: model.Request{GPUMilli: 250, ShareResource: "nvidia.com/gpu.shared"}},
		{name: "HAMi's memory and cores", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000", "nvidia.com/gpucores", "30")).Obj(),
			want: model.Request{GPUMilli: 300, GPUMemoryMiB: 3000, ShareResource: "nvidia.com/gpu"}},
		{name: "HAMi's memory percentage is that part of the GPU", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "50")).Obj(),
			want: model.Request{GPUMilli: 500, ShareResource: "nvidia.com/gpu"}},
		{name: "KAI's fraction and memory", pod: newPod("ns", "p").GPUs(1).Annotation("gpu-fraction", "0.5").Annotation("gpu-memory", "2000").Obj(),
			want: model.Request{GPUMilli: 500, GPUMemoryMiB: 2000, ShareResource: "nvidia.com/gpu"}},
		{name: "a fraction of 1 is a whole GPU", pod: newPod("ns", "p").GPUs(1).Annotation("gpu-fraction", "1").Obj(),
			want: model.Request{GPUs: 1}},
		{name: "a fraction above 1 is refused", pod: newPod("ns", "p").GPUs(1).Annotation("gpu-fraction", "1.5").Obj(), wantReason: "FractionOutOfRange"},
		{name: "a zero fraction is refused", pod: newPod("ns", "p").GPUs(1).Annotation("gpuplane.io/gpu-fraction", "0").Obj(), wantReason: "FractionOutOfRange"},
		{name: "a negative fraction is refused", pod: newPod("ns", "p").GPUs(1).Annotation("gpuplane.io/gpu-fraction", "-0.5").Obj(), wantReason: "FractionOutOfRange"},
		{name: "NaN is refused", pod: newPod("ns", "p").GPUs(1).Annotation("gpu-fraction", "NaN").Obj(), wantReason: "FractionOutOfRange"},
		{name: "cores above 100% are refused", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu", "1", "nvidia.com/gpucores", "150")).Obj(), wantReason: "FractionOutOfRange"},
		{name: "a fraction with a MIG device is refused", pod: newPod("ns", "p").Limits(rl("nvidia.com/mig-1g.10gb", "1")).Annotation("gpu-fraction", "0.5").Obj(), wantReason: "MixedGPURequest"},
		{name: "a fraction without a GPU device is refused", pod: newPod("ns", "p").Limits(rl("cpu", "1")).Annotation("gpu-fraction", "0.5").Obj(), wantReason: "FractionWithoutGPU"},
		{name: "a fraction of two GPUs is refused", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu", "2", "nvidia.com/gpumem", "1000")).Obj(), wantReason: "FractionOfSeveralGPUs"},
		{name: "as many replicas as a GPU has are replicas still, in the node's unit", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu.shared", "4")).Obj(), replicas: 4,
			want: model.Request{GPUMilli: 1000, Replicas: 4, ShareResource: "nvidia.com/gpu.shared"}},
		{name: "more replicas than a GPU has are replicas, estimated at one GPU", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu.shared", "6")).Obj(), replicas: 4,
			want: model.Request{GPUMilli: 1000, Replicas: 6, ShareResource: "nvidia.com/gpu.shared"}},
		{name: "a replica where no node says its sharing factor is estimated at one GPU", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu.shared", "1")).Obj(), replicas: 1,
			want: model.Request{GPUMilli: 1000, Replicas: 1, ShareResource: "nvidia.com/gpu.shared"}},
		{name: "a MIG instance", pod: newPod("ns", "p").Limits(rl("nvidia.com/mig-3g.40gb", "1")).Obj(),
			want: model.Request{MIGSlices: 3, MIGProfile: "3g.40gb"}},
		{name: "a fractional GPU is refused", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu", "500m")).Obj(), wantReason: "FractionalGPU"},
		{name: "two MIG instances are refused", pod: newPod("ns", "p").Limits(rl("nvidia.com/mig-1g.10gb", "2")).Obj(), wantReason: "MixedGPURequest"},
		{name: "whole and shared GPUs together are refused", pod: newPod("ns", "p").Limits(rl("nvidia.com/gpu", "1", "nvidia.com/gpu.shared", "1")).Obj(), wantReason: "MixedGPURequest"},
		{name: "an unknown MIG profile is refused", pod: newPod("ns", "p").Limits(rl("nvidia.com/mig-big", "1")).Obj(), wantReason: "UnknownMIGProfile"},
	}
	unequal := newPod("ns", "p").GPUs(2).Obj()
	unequal.Spec.Containers[0].Resources.Requests = rl("nvidia.com/gpu", "1")
	tests = append(tests, struct {
		name       string
		pod        *corev1.Pod
		replicas   int
		want       model.Request
		wantReason string
	}{name: "requests below limits are refused", pod: unequal, wantReason: "RequestsNotLimits"})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := podRequest(tc.pod, tc.replicas)
			if tc.wantReason != "" {
				var bad *BadInputError
				if !errors.As(err, &bad) || bad.Reason != tc.wantReason {
					t.Fatalf("podRequest() error = %v, want reason %s", err, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GPUs != tc.want.GPUs || got.GPUMilli != tc.want.GPUMilli || got.MIGSlices != tc.want.MIGSlices || got.MIGProfile != tc.want.MIGProfile ||
				got.MilliCPU != tc.want.MilliCPU || got.MemoryMiB != tc.want.MemoryMiB || got.GPUMemoryMiB != tc.want.GPUMemoryMiB || got.ShareResource != tc.want.ShareResource || got.Replicas != tc.want.Replicas ||
				!maps.Equal(got.Scalars, tc.want.Scalars) || !slices.Equal(got.HostPorts, tc.want.HostPorts) {
				t.Errorf("podRequest() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConvertNode(t *testing.T) {
	topo := `{"v":1,"gpus":4,"groups":[{"gpus":[0,1],"nvlinks":12}],"numa":[0,0,1,1]}`
	tests := []struct {
		name      string
		node      *corev1.Node
		wantGPUs  int
		wantMIG   int
		wantModel string
		wantErr   string
		wantWarn  string
		check     func(t *testing.T, n model.Node)
	}{
		{name: "whole GPUs take model and memory from the labels",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "8", "cpu", "64", "memory", "256Gi")).Label(LabelGPUProduct, "H100").Label(LabelGPUMemory, "81559").Obj(),
			wantGPUs: 8, wantModel: "H100",
			check: func(t *testing.T, n model.Node) {
				if n.MilliCPU != 64000 || n.MemoryMiB != 256*1024 || n.GPUs[3].MemoryMiB != 81559 {
					t.Errorf("node = %+v", n)
				}
			}},
		{name: "GPUs in MIG mode are counted from gpu.count",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "6", "nvidia.com/mig-3g.40gb", "4")).Label(LabelGPUCount, "8").Obj(),
			wantGPUs: 8, wantMIG: 2},
		{name: "the agent's MIG layout says which GPUs are in MIG mode and their instances",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "6", "nvidia.com/mig-1g.10gb", "7", "nvidia.com/mig-3g.40gb", "2")).Label(LabelGPUCount, "6").Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":8,"groups":[],"numa":[0,0,0,0,1,1,1,1],"mig":[[1,1,1,1,1,1,1],[3,3]]}`).Obj(),
			wantGPUs: 8, wantMIG: 2,
			check: func(t *testing.T, n model.Node) {
				g0, g1, g2 := n.GPUs[0], n.GPUs[1], n.GPUs[2]
				if g0.MIGSlices != 7 || g0.MIGInstanceSlices != 1 || g1.MIGSlices != 6 || g1.MIGInstanceSlices != 3 {
					t.Errorf("MIG GPUs %+v and %+v, want seven 1-slice instances on GPU 0 and two 3-slice ones on GPU 1", g0, g1)
				}
				if g2.MIGSlices != 0 || !g2.WholeOnly || n.Topology == nil {
					t.Errorf("GPU 2 %+v (topology %v), want a whole GPU of a node with topology", g2, n.Topology != nil)
				}
			}},
		{name: "without the agent's layout, MIG GPUs are those the topology has beyond the whole ones",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "6", "nvidia.com/mig-1g.10gb", "7")).Label(LabelGPUCount, "6").Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":8,"groups":[]}`).Obj(),
			wantGPUs: 8, wantMIG: 2},
		{name: "replicas under their own name are offered only as shares",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu.shared", "32")).Label("nvidia.com/gpu.replicas", "4").Obj(),
			wantGPUs: 8,
			check: func(t *testing.T, n model.Node) {
				if !n.GPUs[0].SharesOnly || n.GPUs[0].WholeOnly {
					t.Errorf("GPU 0 %+v, want shares only", n.GPUs[0])
				}
			}},
		{name: "replicas under their own name without the replicas label are shared over gpu.count",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu.shared", "8")).Label(LabelGPUCount, "2").Obj(),
			wantGPUs: 2,
			check: func(t *testing.T, n model.Node) {
				for _, g := range n.GPUs {
					if !g.SharesOnly || g.ShareResource != "nvidia.com/gpu.shared" || g.MinShareMilli != 250 {
						t.Errorf("GPU %+v, want shares only of nvidia.com/gpu.shared, four replicas each", g)
					}
				}
			}},
		{name: "replicas besides whole GPUs without the replicas label are shared over the other GPUs",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "2", "nvidia.com/gpu.shared", "6")).Label(LabelGPUCount, "4").Obj(),
			wantGPUs: 4,
			check: func(t *testing.T, n model.Node) {
				if g := n.GPUs[0]; g.SharesOnly || g.WholeOnly || g.MinShareMilli != 333 {
					t.Errorf("GPU 0 %+v, want one offered both ways, three replicas each", g)
				}
			}},
		{name: "replicas without the replicas label nor a GPU count are each a GPU's one replica",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu.shared", "8")).Obj(),
			wantGPUs: 8,
			check: func(t *testing.T, n model.Node) {
				if g := n.GPUs[7]; !g.SharesOnly || g.ShareResource != "nvidia.com/gpu.shared" || g.MinShareMilli != 1000 {
					t.Errorf("GPU 7 %+v, want shares only of nvidia.com/gpu.shared, one replica", g)
				}
			}},
		{name: "replicas a GPU count does not divide are each a GPU's one replica, with a warning",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu.shared", "7")).Label(LabelGPUCount, "2").Obj(),
			wantGPUs: 7, wantWarn: "do not share the 7 replicas of nvidia.com/gpu.shared evenly"},
		{name: "the replicas label wins over the GPU count",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu.shared", "8")).Label(LabelGPUCount, "2").Label("nvidia.com/gpu.replicas", "2").Obj(),
			wantGPUs: 4},
		{name: "a quarantined GPU's replicas count from capacity",
			node: func() *corev1.Node {
				n := build.Node("n").Resources(rl("nvidia.com/gpu.shared", "4")).Label(LabelGPUCount, "2").Annotation(gpunode.QuarantineAnnotation, `{"v":1,"gpus":[`+
					`{"gpu":1,"uuid":"GPU-1","xid":48,"class":"memory-uncorrectable","state":"draining","since":"2026-11-25T10:00:00Z","fails":1}]}`).Obj()
				n.Status.Capacity = rl("nvidia.com/gpu.shared", "8")
				return n
			}(),
			wantGPUs: 2,
			check: func(t *testing.T, n model.Node) {
				if g := n.GPUs[1]; !g.Withdrawn || g.MinShareMilli != 250 {
					t.Errorf("GPU 1 %+v, want withdrawn, four replicas", g)
				}
			}},
		{name: "the topology annotation gives NVLink islands and NUMA nodes",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "4")).Annotation("gpuplane.io/gpu-topology", topo).Obj(),
			wantGPUs: 4,
			check: func(t *testing.T, n model.Node) {
				if n.Topology == nil {
					t.Fatal("no topology")
				}
				if l, _ := n.Topology.Between(0, 1); l.NVLinks != 12 {
					t.Errorf("GPUs 0-1 link = %v, want NV12", l)
				}
				if l, _ := n.Topology.Between(0, 2); l.NVLinks != 0 || l.PCIe != gpu.PCIeSystem {
					t.Errorf("GPUs 0-2 link = %v, want SYS", l)
				}
				if n.GPUs[3].NUMANode != 1 {
					t.Errorf("GPU 3 NUMA = %d, want 1", n.GPUs[3].NUMANode)
				}
			}},
		{name: "a GPU gives pods its memory less what the driver reserves",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "4")).Label(LabelGPUMemory, "81559").Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":4,"groups":[],"reservedMiB":[509,509,0]}`).Obj(),
			wantGPUs: 4,
			check: func(t *testing.T, n model.Node) {
				if got := []int64{n.GPUs[0].MemoryMiB, n.GPUs[2].MemoryMiB, n.GPUs[3].MemoryMiB}; !slices.Equal(got, []int64{81050, 81559, 81559}) {
					t.Errorf("GPU memory %v MiB, want 81050 where 509 MiB are reserved, else 81559", got)
				}
			}},
		{name: "a reservation as large as the GPU is ignored with a warning",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "2")).Label(LabelGPUMemory, "1000").Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":2,"groups":[],"reservedMiB":[10,1000]}`).Obj(),
			wantGPUs: 2, wantWarn: "reservedMiB[1] is 1000 MiB, not less than the GPU's 1000 MiB",
			check: func(t *testing.T, n model.Node) {
				if n.GPUs[0].MemoryMiB != 1000 {
					t.Errorf("GPU 0 memory %d MiB, want the label's 1000 when the reservations are ignored", n.GPUs[0].MemoryMiB)
				}
			}},
		{name: "a negative reservation in the topology is ignored with a warning",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "2")).Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":2,"reservedMiB":[-1]}`).Obj(),
			wantGPUs: 2, wantWarn: "reservedMiB[0]: must be 0 to 16777216, got -1"},
		{name: "a topology for another GPU count is ignored with a warning",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "2")).Annotation("gpuplane.io/gpu-topology", topo).Obj(),
			wantGPUs: 2, wantWarn: "describes 4 GPUs but the node has 2"},
		{name: "an unparsable topology is ignored with a warning",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "2")).Annotation("gpuplane.io/gpu-topology", "{").Obj(),
			wantGPUs: 2, wantWarn: "annotation gpuplane.io/gpu-topology: not the topology JSON"},
		{name: "a negative GPU count in the topology is ignored with a warning",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "2")).Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":-1}`).Obj(),
			wantGPUs: 2, wantWarn: "gpus: must be 0 to 64, got -1"},
		{name: "a huge GPU count in the topology is ignored with a warning",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "2")).Annotation("gpuplane.io/gpu-topology", `{"v":1,"gpus":2000000000}`).Obj(),
			wantGPUs: 2, wantWarn: "gpus: must be 0 to 64, got 2000000000"},
		{name: "time-slicing without renaming counts physical GPUs",
			node:     build.Node("n").Resources(rl("nvidia.com/gpu", "32")).Label("nvidia.com/gpu.replicas", "4").Obj(),
			wantGPUs: 8},
		{name: "a huge gpu.count on a MIG node is refused",
			node:    build.Node("n").Resources(rl("nvidia.com/mig-1g.10gb", "7")).Label("nvidia.com/gpu.count", "5000000").Obj(),
			wantErr: "label nvidia.com/gpu.count: must be a whole number from 0 to 64, got \"5000000\""},
		{name: "more GPUs than a node holds are refused",
			node:    build.Node("n").Resources(rl("nvidia.com/gpu", "5000000")).Obj(),
			wantErr: "status.allocatable[nvidia.com/gpu]: must be a whole number from 0 to 64000"},
		{name: "65 whole GPUs are refused",
			node:    build.Node("n").Resources(rl("nvidia.com/gpu", "65")).Obj(),
			wantErr: "status.allocatable: 65 GPUs is more than the 64 one node can hold"},
		{name: "a fractional GPU count is refused",
			node:    build.Node("n").Resources(rl("nvidia.com/gpu", "1500m")).Obj(),
			wantErr: "status.allocatable[nvidia.com/gpu]: must be a whole number"},
		{name: "a negative GPU count is refused",
			node:    build.Node("n").Resources(rl("nvidia.com/gpu", "-1")).Obj(),
			wantErr: "status.allocatable[nvidia.com/gpu]: must be a whole number"},
		{name: "a GPU the node quarantined keeps its index and serves nothing",
			node: func() *corev1.Node {
				n := build.Node("n").Resources(rl("nvidia.com/gpu", "7")).Annotation(gpunode.QuarantineAnnotation, `{"v":1,"gpus":[`+
					`{"gpu":3,"uuid":"GPU-3","xid":48,"class":"memory-uncorrectable","state":"draining","since":"2026-11-25T10:00:00Z","fails":1},`+
					`{"gpu":5,"uuid":"GPU-5","xid":79,"class":"bus","state":"returned","since":"2026-11-25T09:00:00Z","fails":1}]}`).Obj()
				n.Status.Capacity = rl("nvidia.com/gpu", "8")
				return n
			}(),
			wantGPUs: 8,
			check: func(t *testing.T, n model.Node) {
				for _, g := range n.GPUs {
					if g.Withdrawn != (g.Index == 3) {
						t.Errorf("GPU %d withdrawn %v; want only GPU 3 (GPU 5 has returned)", g.Index, g.Withdrawn)
					}
				}
			}},
		{name: "an unreadable quarantine record places by allocatable and says so",
			node: func() *corev1.Node {
				n := build.Node("n").Resources(rl("nvidia.com/gpu", "7")).Annotation(gpunode.QuarantineAnnotation, `{"v":1,"gpus":[{"gpu":-1}]}`).Obj()
				n.Status.Capacity = rl("nvidia.com/gpu", "8")
				return n
			}(),
			wantGPUs: 7, wantWarn: "gpus[0].gpu"},
		{name: "zero replicas are refused",
			node:    build.Node("n").Resources(rl("nvidia.com/gpu.shared", "8")).Label("nvidia.com/gpu.replicas", "0").Obj(),
			wantErr: "label nvidia.com/gpu.replicas: must be a whole number from 1 to 1000, got \"0\""},
		{name: "an unreadable GPU memory is refused",
			node:    build.Node("n").Resources(rl("nvidia.com/gpu", "1")).Label("nvidia.com/gpu.memory", "-80").Obj(),
			wantErr: "label nvidia.com/gpu.memory"},
		{name: "CPU beyond any machine is refused",
			node:    build.Node("n").Resources(rl("cpu", "1e30")).Obj(),
			wantErr: "status.allocatable.cpu"},
		{name: "negative memory is refused",
			node:    build.Node("n").Resources(rl("memory", "-1Gi")).Obj(),
			wantErr: "status.allocatable.memory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, warn, err := convertNode(tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(n.GPUs) != tc.wantGPUs {
				t.Fatalf("%d GPUs, want %d", len(n.GPUs), tc.wantGPUs)
			}
			mig := 0
			for _, g := range n.GPUs {
				if g.MIGSlices > 0 {
					mig++
				}
				if g.Model != tc.wantModel && tc.wantModel != "" {
					t.Errorf("GPU %d model %q, want %q", g.Index, g.Model, tc.wantModel)
				}
			}
			if mig != tc.wantMIG {
				t.Errorf("%d MIG GPUs, want %d", mig, tc.wantMIG)
			}
			if (tc.wantWarn == "") != (warn == "") || !strings.Contains(warn, tc.wantWarn) {
				t.Errorf("warning %q, want one containing %q", warn, tc.wantWarn)
			}
			if tc.check != nil {
				tc.check(t, n)
			}
		})
	}
}

func TestSharesRoundTrip(t *testing.T) {
	node := &model.Node{Name: "n", GPUs: []model.GPU{{Index: 0, MemoryMiB: 100}, {Index: 1, MemoryMiB: 100}, {Index: 2, MIGSlices: 7}}}
	tests := []struct {
		name   string
		shares []model.GPUShare
		text   string
	}{
		{"whole GPUs", []model.GPUShare{{Index: 0, Milli: 1000, MemoryMiB: 100}, {Index: 1, Milli: 1000, MemoryMiB: 100}}, "0,1"},
		{"a share", []model.GPUShare{{Index: 1, Milli: 250}}, "1:250"},
		{"a MIG instance", []model.GPUShare{{Index: 2, MIGSlices: 3}}, "2:m3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := formatShares(tc.shares); got != tc.text {
				t.Fatalf("formatShares() = %q, want %q", got, tc.text)
			}
			back, err := parseShares(tc.text, node)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back, tc.shares) {
				t.Errorf("parseShares(%q) = %+v, want %+v", tc.text, back, tc.shares)
			}
		})
	}
	if _, err := parseShares("9", node); err == nil {
		t.Error("parseShares accepted a GPU index the node does not have")
	}
}

// TestBuildSnapshot checks how pods become groups: labels and aliases,
// queues and their fallbacks, and what is held back with which reason.
func TestBuildSnapshot(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	c.upsertNode(build.Node("n1").Resources(rl("nvidia.com/gpu", "8", "cpu", "32", "memory", "64Gi")).Obj())
	for _, q := range []*v1alpha1.Queue{
		build.Queue("root").GPUs("8", "").Obj(), build.Queue("team").Parent("root").GPUs("4", "").Obj(), build.Queue("batch").GPUs("", "").Obj(),
		// Children's guarantees above the parent's: the second child is
		// the one that breaks the hierarchy and is left out.
		build.Queue("greedy").Parent("root").GPUs("6", "").Obj(),
		build.Queue("over").GPUs("4", "2").Obj(),
	} {
		q.CreationTimestamp = metav1.Unix(int64(len(c.queues)), 0)
		c.upsertQueue(q)
	}
	c.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Annotations: map[string]string{v1alpha1.DefaultQueueAnnotation: "team"}}})
	c.upsertPodGroup(build.PodGroup("ml", "train", 2).Obj())
	c.upsertPodGroup(build.PodGroup("ml", "big", 5).Obj())
	add := func(name string, labels map[string]string) {
		p := newPod("ml", name).GPUs(1).Obj()
		p.Labels = labels
		c.upsertPod(p)
	}
	add("w0", map[string]string{v1alpha1.PodGroupLabel: "train"})
	add("w1", map[string]string{v1alpha1.SchedulerPluginsPodGroupLabel: "train"})
	add("lone", nil)
	add("kueue", map[string]string{v1alpha1.KueueQueueLabel: "batch"})
	add("lost", map[string]string{v1alpha1.QueueLabel: "nowhere"})
	add("greedy", map[string]string{v1alpha1.QueueLabel: "greedy"})
	add("to-parent", map[string]string{v1alpha1.QueueLabel: "root"})
	add("big-0", map[string]string{v1alpha1.PodGroupLabel: "big"})
	add("orphan", map[string]string{v1alpha1.PodGroupLabel: "missing"})
	c.upsertPodGroup(build.PodGroup("ml", "half-done", 2).Obj())
	done := newPod("ml", "half-done-0").GPUs(1).Obj()
	done.Labels = map[string]string{v1alpha1.PodGroupLabel: "half-done"}
	done.Spec.NodeName, done.Status.Phase = "n1", corev1.PodSucceeded
	c.upsertPod(done)
	add("half-done-1", map[string]string{v1alpha1.PodGroupLabel: "half-done"})
	gated := newPod("ml", "gated").GPUs(1).Obj()
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}}
	c.upsertPod(gated)
	both := newPod("ml", "both-gates").GPUs(1).Obj()
	both.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGate}, {Name: "example.com/wait"}}
	c.upsertPod(both)
	ours := newPod("ml", "ours-gated").GPUs(1).Obj()
	ours.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGate}}
	c.upsertPod(ours)
	other := newPod("ml", "other").GPUs(1).SchedulerName("default-scheduler").Obj()
	c.upsertPod(other)

	b := newBuilder(v1alpha1.SchedulerName, -1, logr.Discard())
	in := c.snapshot(b, newRefusals(), time.Unix(200, 0))

	pending := map[string]model.PodGroup{}
	for _, g := range in.snap.Pending {
		pending[g.Name] = g
	}
	tests := []struct {
		name      string
		group     string
		wantQueue string
		wantPods  int
		wantMin   int
		wantHeld  string
	}{
		{name: "both pod group labels join one gang in the namespace's default queue", group: "pg/ml/train", wantQueue: "team", wantPods: 2, wantMin: 2},
		{name: "a finished member counts toward minMember", group: "pg/ml/half-done", wantQueue: "team", wantPods: 1, wantMin: 1},
		{name: "a lone pod is a group of one", group: "pod/ml/lone", wantQueue: "team", wantPods: 1, wantMin: 1},
		{name: "Kueue's queue label is honoured", group: "pod/ml/kueue", wantQueue: "batch", wantPods: 1, wantMin: 1},
		{name: "an unknown queue holds the pod", group: "pod/ml/lost", wantHeld: "UnknownQueue"},
		{name: "an invalid queue holds its pods", group: "pod/ml/greedy", wantHeld: "UnknownQueue"},
		{name: "a parent queue takes no work", group: "pod/ml/to-parent", wantHeld: "QueueNotLeaf"},
		{name: "minMember above the pods: the core says the gang waits for the rest", group: "pg/ml/big", wantQueue: "team", wantPods: 1, wantMin: 1},
		{name: "a missing PodGroup holds its pods", group: "pg/ml/missing", wantHeld: "PodGroupNotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := in.groups[tc.group]
			if g == nil {
				t.Fatalf("no group %s", tc.group)
			}
			if tc.wantHeld != "" {
				if g.held == nil || g.held.Reason != tc.wantHeld {
					t.Fatalf("held = %v, want %s", g.held, tc.wantHeld)
				}
				if _, ok := pending[tc.group]; ok {
					t.Errorf("held group %s was offered to the core", tc.group)
				}
				return
			}
			p, ok := pending[tc.group]
			if !ok {
				t.Fatalf("group %s not pending (held %v)", tc.group, g.held)
			}
			if p.Queue != tc.wantQueue || len(p.Pods) != tc.wantPods || p.Min() != tc.wantMin {
				t.Errorf("group = queue %q, %d pods, min %d; want %q, %d, %d", p.Queue, len(p.Pods), p.Min(), tc.wantQueue, tc.wantPods, tc.wantMin)
			}
		})
	}
	t.Run("bad queues are reported and the rest of the hierarchy kept", func(t *testing.T) {
		if e := in.queueErrs["greedy"]; e == nil || !strings.Contains(e.Msg, "children's guaranteed quotas") {
			t.Errorf("greedy: %v, want a children's guarantees error", e)
		}
		if e := in.queueErrs["over"]; e == nil || !strings.Contains(e.Msg, "above its own limit") {
			t.Errorf("over: %v, want a guarantee above limit error", e)
		}
		var names []string
		for _, q := range in.snap.Queues {
			names = append(names, q.Name)
		}
		if !slices.Equal(names, []string{"root", "batch", "team"}) {
			t.Errorf("queues = %v, want [root batch team] (parents first, then by age)", names)
		}
	})
	t.Run("a pod another controller gates is not offered", func(t *testing.T) {
		for _, name := range []string{"pod/ml/gated", "pod/ml/both-gates"} {
			if g := in.groups[name]; g != nil && len(g.pending) > 0 {
				t.Errorf("%s, gated by example.com/wait, was offered to the core", name)
			}
		}
	})
	t.Run("a pod gpuplane's gate alone holds is offered", func(t *testing.T) {
		if _, ok := pending["pod/ml/ours-gated"]; !ok {
			t.Errorf("the pod gated by %s alone was not offered to the core: the core must say what it waits for", v1alpha1.SchedulingGate)
		}
	})
	t.Run("another scheduler's pending pods are not ours", func(t *testing.T) {
		if _, ok := in.groups["pod/ml/other"]; ok {
			t.Error("a pending pod of default-scheduler was grouped")
		}
	})
}

func withInit(p *corev1.Pod, cs ...corev1.Container) *corev1.Pod {
	p.Spec.InitContainers = append(p.Spec.InitContainers, cs...)
	return p
}

func withOverhead(p *corev1.Pod, overhead corev1.ResourceList) *corev1.Pod {
	p.Spec.Overhead = overhead
	return p
}
