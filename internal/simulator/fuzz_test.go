package simulator

import (
	"strings"
	"testing"
)

// The trace readers take files from anywhere: a corrupt or hostile one is
// refused with an error, never a panic or an allocation beyond the bounds
// in trace.go.

func FuzzParseOpenBNodes(f *testing.F) {
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,64000,262144,2,V100M16\nopenb-node-0002,96000,786432,8,G2\n")
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,5000000000,X\n")
	f.Add("sn,cpu_milli,memory_mib,gpu\nn,-1,1,1\n")
	f.Add("sn,cpu_milli,memory_mib,gpu,model,block,rack,clique\nn0,1000,1000,8,G2,b1,r1,c1\nn1,1000,1000,8,G2,,,\n")
	f.Fuzz(func(t *testing.T, csv string) {
		nodes, err := ParseOpenBNodes("nodes.csv", strings.NewReader(csv))
		if err != nil {
			return
		}
		for _, n := range nodes {
			if len(n.GPUs) > MaxNodeGPUs || n.MilliCPU < 0 || n.MemoryMiB < 0 {
				t.Fatalf("accepted node out of bounds: %s with %d GPUs", n.Name, len(n.GPUs))
			}
			for k, v := range n.Domains {
				if k != hostnameLabel && (v == "" || len(v) > maxDomainValue) {
					t.Fatalf("accepted node %s with domain %s=%q", n.Name, k, v)
				}
			}
		}
	})
}

func FuzzParseOpenBPods(f *testing.F) {
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"openb-pod-0017,88000,327680,8,1000,,LS,Running,9437497,10769854,9437497\n" +
		"openb-pod-0022,4000,15258,1,460,V100M16|V100M32,LS,Running,10911981,11235112,10911981\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,99999999999999,1\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\"p,1,1,1,1\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,pod_group,min_member,required_topology,preferred_topology\n" +
		"p0,1,1,8,1000,g,2,block,rack\np1,1,1,8,1000,g,2,block,rack\np2,1,1,1,1000,,,,\n")
	f.Fuzz(func(t *testing.T, csv string) {
		pods, err := ParseOpenBPods("pods.csv", strings.NewReader(csv))
		if err != nil {
			return
		}
		for _, p := range pods {
			r := p.Request
			if r.MilliCPU < 0 || r.MemoryMiB < 0 || r.GPUs < 0 || r.GPUMilli < 0 || r.GPUMilli >= 1000 || p.MinMember < 0 || p.MinMember > MaxTracePods {
				t.Fatalf("accepted pod out of bounds: %+v", p)
			}
			if p.Topology != nil {
				if err := p.Topology.Check("topology"); err != nil || p.Group == "" {
					t.Fatalf("accepted pod %s with topology %+v in group %q: %v", p.Name, p.Topology, p.Group, err)
				}
			}
		}
	})
}

func FuzzReadYAMLTrace(f *testing.F) {
	f.Add(`nodes:
- {name: a100, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: A100, nvlink: true}
queues:
- {name: team-a, guaranteed: {gpuMilli: 8000}, weight: 1}
pods:
- {name: train, queue: team-a, count: 4, minMember: 4, gpus: 1, milliCPU: 8000, createdAt: 0, duration: 3600}
`)
	f.Add("nodes:\n- {name: n, count: 2000000000, gpus: 8}\npods: []\n")
	f.Add("nodes:\n- {name: n, gpus: 2000000000}\npods: []\n")
	f.Add("nodes: []\npods:\n- {name: p, count: 2000000000}\n")
	f.Add("nodes:\n- {name: d, gpus: 8, gpuModel: H100, dra: true}\npods:\n- {name: c, count: 3, claimGPUs: 2, claimModels: [H100, H100]}\n")
	f.Add(migDemandTrace)
	f.Add(topoTrace)
	f.Add(rackTrace)
	f.Fuzz(func(t *testing.T, y string) {
		tr, err := ReadYAMLTrace("trace.yaml", strings.NewReader(y))
		if err != nil {
			return
		}
		if len(tr.Nodes) > MaxTraceNodes || len(tr.Pods) > MaxTracePods {
			t.Fatalf("accepted %d nodes and %d pods", len(tr.Nodes), len(tr.Pods))
		}
		for _, p := range tr.Pods {
			if p.Topology != nil {
				if err := p.Topology.Check("topology"); err != nil || p.Group == "" {
					t.Fatalf("accepted pod %s with topology %+v in group %q: %v", p.Name, p.Topology, p.Group, err)
				}
			}
		}
		for _, n := range tr.Nodes {
			if len(n.GPUs) > MaxNodeGPUs {
				t.Fatalf("accepted node %s with %d GPUs", n.Name, len(n.GPUs))
			}
			if len(n.Domains) > MaxNodeDomains+1 {
				t.Fatalf("accepted node %s with %d domains", n.Name, len(n.Domains))
			}
			if n.MIG != nil {
				for _, p := range n.MIG.Profiles {
					if p.Slices < 1 || p.Instances < 1 || p.Slices*p.Instances > 7 {
						t.Fatalf("accepted node %s with MIG profile %+v", n.Name, p)
					}
				}
			}
		}
	})
}
