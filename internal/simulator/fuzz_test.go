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

func FuzzParsePhillyRunTimes(f *testing.F) {
	f.Add("runtime\n0.0\n1.0\n1186.0\n4628239.0\n")
	f.Add("runtime\n-1\n")
	f.Add("runtime\nNaN\n+Inf\n1e300\n")
	f.Add("\ufeffruntime\n\"1\n")
	f.Fuzz(func(t *testing.T, csv string) {
		runs, err := ParsePhillyRunTimes("philly.csv", strings.NewReader(csv))
		if err != nil {
			return
		}
		for _, v := range runs {
			if v < 0 || v > maxRunTime {
				t.Fatalf("accepted run time %d out of bounds", v)
			}
		}
	})
}

func FuzzParseAlibabaGPU2025(f *testing.F) {
	head := "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time\n"
	f.Add(head + "instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\n" +
		"instance_13574,CN,app_130,64,64,0,0,1,1,320.0,320.0,255.0,300.0,-1,1435629.0,1435629.0,1435760.0\n")
	f.Add(head + "i,HN,a,1e308,1,1,1,1,1,1,1,1,1,1,NaN,NaN,NaN\n")
	f.Add(head + "i,CN,a,1,1,0,0,1,1,1,1,1,1,1,10,10,5\n")
	f.Add("instance_sn,role\ni,HN\n")
	f.Fuzz(func(t *testing.T, csv string) {
		inst, err := ParseAlibabaGPU2025("trace.csv", strings.NewReader(csv))
		if err != nil {
			return
		}
		for _, in := range inst {
			if (in.Role != RoleCN && in.Role != RoleHN) || in.App == "" || in.MilliCPU < 0 || in.MemoryMiB < 0 || in.GPUs < 0 || in.GPUs > MaxNodeGPUs ||
				in.RDMA < 0 || in.RDMA > 100 || in.CreatedAt < -1 || in.DeletedAt < -1 || (in.CreatedAt >= 0 && in.DeletedAt >= 0 && in.DeletedAt < in.CreatedAt) {
				t.Fatalf("accepted instance out of bounds: %+v", in)
			}
		}
	})
}
