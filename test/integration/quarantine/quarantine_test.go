package quarantine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/nodesim"
	"github.com/gpuplane/gpuplane/internal/quarantine"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// simNode is a simulated DGX H100 running the real agent with the API
// server configured and its fault controls on a loopback port.
type simNode struct {
	name    string
	sim     *nodesim.Simulator
	control string
	uuids   []string
}

// startNode starts the node with the agent config given (the quarantine's
// times shortened for a test).
func startNode(t testing.TB, name, agentConfig string) *simNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "q-")
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(agentConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	control := framework.FreeLoopbackAddr(t)
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	s, err := nodesim.Start(t.Context(), nodesim.Config{
		NodeName: name, Dir: filepath.Join(dir, "k"), Client: env.Client, DeleteNodeOnStop: true, Logger: log,
		Agent: &nodesim.AgentConfig{Binary: agentBinary, Profile: "dgxh100", ConfigFile: cfgFile, Kubeconfig: env.ControlPlane.Kubeconfig(),
			ExtraArgs: []string{"--simulate-control-addr", control}},
	})
	if err != nil {
		t.Fatalf("starting simulated node %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stopping simulated node %s: %v", name, err)
		}
		zero := int64(0)
		pods, err := env.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err == nil {
			for _, p := range pods.Items {
				if err := env.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting pod %s/%s: %v", p.Namespace, p.Name, err)
				}
			}
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "k", "agent.log")); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("agent log of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-60):], "\n"))
			}
		}
		_ = os.RemoveAll(dir)
	})
	// The agent's simulated GPUs are named after the node: the same
	// profile and node name give the same UUIDs here.
	p, err := sim.Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: name})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := &simNode{name: name, sim: s, control: control}
	for _, d := range devs {
		n.uuids = append(n.uuids, d.UUID)
	}
	_ = b.Close()
	n.waitGPUs(t, 8, 8)
	env.WaitNodesUntainted(t, "kubernetes.io/hostname="+name, 60*time.Second)
	return n
}

// fault posts one of the sim's fault controls to the running agent.
func (n *simNode) fault(t testing.TB, path string) {
	t.Helper()
	framework.SimFault(t, n.control, path)
}

func (n *simNode) get(ctx context.Context) (*corev1.Node, error) {
	return env.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
}

// waitGPUs waits until the Node offers capacity and allocatable GPUs.
func (n *simNode) waitGPUs(t testing.TB, capacity, allocatable int64) {
	t.Helper()
	framework.Eventually(t, 90*time.Second, fmt.Sprintf("node %s with %d/%d GPUs allocatable", n.name, allocatable, capacity), func(ctx context.Context) (bool, error) {
		node, err := n.get(ctx)
		if err != nil {
			return false, err
		}
		c, a := node.Status.Capacity[gpunode.ResourceGPU], node.Status.Allocatable[gpunode.ResourceGPU]
		if c.Value() != capacity || a.Value() != allocatable {
			return false, fmt.Errorf("capacity %s, allocatable %s", c.String(), a.String())
		}
		return true, nil
	})
}

func taint(node *corev1.Node) (corev1.Taint, bool) {
	for _, t := range node.Spec.Taints {
		if t.Key == gpunode.TaintGPUFault {
			return t, true
		}
	}
	return corev1.Taint{}, false
}

func condition(node *corev1.Node) (corev1.NodeCondition, bool) {
	for _, c := range node.Status.Conditions {
		if c.Type == gpunode.ConditionGPUQuarantine {
			return c, true
		}
	}
	return corev1.NodeCondition{}, false
}

// waitQuarantine waits until the Node shows the condition with reason and
// a message holding every string of says, and the taint (or its absence).
func (n *simNode) waitQuarantine(t testing.TB, timeout time.Duration, tainted bool, reason string, says ...string) *corev1.Node {
	t.Helper()
	var last *corev1.Node
	framework.Eventually(t, timeout, fmt.Sprintf("node %s: condition %s, tainted %v", n.name, reason, tainted), func(ctx context.Context) (bool, error) {
		node, err := n.get(ctx)
		if err != nil {
			return false, err
		}
		last = node
		tn, has := taint(node)
		c, ok := condition(node)
		switch {
		case !ok:
			return false, fmt.Errorf("no %s condition", gpunode.ConditionGPUQuarantine)
		case c.Reason != reason:
			return false, fmt.Errorf("condition %s %s: %s", c.Status, c.Reason, c.Message)
		case has != tainted:
			return false, fmt.Errorf("taint %v present %v", tn, has)
		case has && (tn.Effect != corev1.TaintEffectNoSchedule || tn.Value != "xid-79"):
			return false, fmt.Errorf("taint %v, want %s=xid-79:NoSchedule", tn, gpunode.TaintGPUFault)
		}
		for _, s := range says {
			if !strings.Contains(c.Message, s) {
				return false, fmt.Errorf("condition message %q lacks %q", c.Message, s)
			}
		}
		return true, nil
	})
	return last
}

// nodeEvents returns the reasons of the events on the Node, oldest first.
func (n *simNode) nodeEvents(t testing.TB) []string {
	t.Helper()
	evs, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + n.name})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason)
	}
	return out
}

// podResources asks the node's PodResources API which pods hold which
// device IDs: "namespace/name" -> device IDs.
func (n *simNode) podResources(t testing.TB) map[string][]string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+n.sim.PodResourcesSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(t.Context(), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("PodResources List: %v", err)
	}
	out := map[string][]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				out[p.GetNamespace()+"/"+p.GetName()] = append(out[p.GetNamespace()+"/"+p.GetName()], d.GetDeviceIds()...)
			}
		}
	}
	return out
}

const fastQuarantine = `version: v1
health:
  quarantine:
    window: 10m
    evictionTimeout: 60s
    validation: 3s
    validationTimeout: 60s
    retryHeldAfter: %s
`

// TestXID79OnGPU3 is the case: GPU 3 of a busy DGX H100 falls off
// the bus (XID 79). The node is tainted and says which GPU, only GPU 3's
// pod is evicted, the GPU is reset (the simulated reset brings it back on
// the bus) and revalidated, and the taint and condition are lifted.
func TestXID79OnGPU3(t *testing.T) {
	n := startNode(t, "q-xid79", fmt.Sprintf(fastQuarantine, "1h"))
	ns := env.CreateNamespace(t)
	n.waitQuarantine(t, 60*time.Second, false, gpunode.ReasonNoGPUQuarantined)
	for i := range 8 {
		p := framework.Pod(ns, fmt.Sprintf("train-%d", i)).GPUs(1).NodeName(n.name).Obj()
		if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		env.WaitPodPhase(t, ns, fmt.Sprintf("train-%d", i), corev1.PodRunning, 60*time.Second)
	}
	before := n.podResources(t)
	victim := ""
	for pod, ids := range before {
		if slices.Contains(ids, n.uuids[3]) {
			victim = pod
		}
	}
	if len(before) != 8 || victim == "" {
		t.Fatalf("PodResources before the fault: %v; want 8 pods, one holding GPU 3 (%s)", before, n.uuids[3])
	}

	n.fault(t, "/lose?gpu=3")
	n.waitQuarantine(t, 30*time.Second, true, gpunode.ReasonGPUQuarantined, fmt.Sprintf("GPU 3 (%s)", n.uuids[3]), "XID 79")
	// The victim goes; the other seven keep running with the same devices.
	vns, vname, _ := strings.Cut(victim, "/")
	framework.Eventually(t, 60*time.Second, "the pod on GPU 3 evicted", func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods(vns).Get(ctx, vname, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	n.waitQuarantine(t, 60*time.Second, false, gpunode.ReasonNoGPUQuarantined)
	n.waitGPUs(t, 8, 8)
	after := n.podResources(t)
	delete(before, victim)
	if len(after) != 7 {
		t.Fatalf("PodResources after: %v, want the 7 pods of the other GPUs", after)
	}
	for pod, ids := range before {
		if !slices.Equal(after[pod], ids) {
			t.Errorf("pod %s held %v before the fault and %v after", pod, ids, after[pod])
		}
		_, name, _ := strings.Cut(pod, "/")
		p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			t.Errorf("pod %s on another GPU was disturbed: %v %v", pod, err, p.Status.Phase)
		}
	}
	events := n.nodeEvents(t)
	for _, want := range []string{quarantine.ReasonQuarantined, quarantine.ReasonEvicted, quarantine.ReasonReset, quarantine.ReasonReturned} {
		if !slices.Contains(events, want) {
			t.Errorf("no %s event on the Node; events: %v", want, events)
		}
	}
	node, err := n.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := gpunode.ParseQuarantine(node.Annotations[gpunode.QuarantineAnnotation])
	if err != nil || len(rec.GPUs) != 1 || rec.GPUs[0].Index != 3 || rec.GPUs[0].State != gpunode.QuarantineReturned {
		t.Fatalf("quarantine record = %+v, %v; want GPU 3 returned", rec, err)
	}

	// Every step is also a metric on the agent's /metrics.
	metrics := n.scrape(t)
	for _, want := range []string{
		fmt.Sprintf(`gpuplane_gpu_quarantine_state{gpu="3",state="returned",uuid="%s"} 1`, n.uuids[3]),
		fmt.Sprintf(`gpuplane_gpu_quarantine_state{gpu="3",state="held",uuid="%s"} 0`, n.uuids[3]),
		fmt.Sprintf(`gpuplane_gpu_quarantine_state{gpu="0",state="in-service",uuid="%s"} 1`, n.uuids[0]),
		`gpuplane_gpu_quarantine_transitions_total{class="bus",from="in-service",to="draining"} 1`,
		`gpuplane_gpu_quarantine_transitions_total{class="bus",from="validating",to="returned"} 1`,
		`gpuplane_gpu_quarantine_resets_total{result="ok"} 1`,
		`gpuplane_gpu_quarantine_evictions_total{result="evicted"} 1`,
		`gpuplane_gpu_quarantine_fault_to_node_seconds_count 1`,
		`gpuplane_gpu_quarantine_state_duration_seconds_count{state="validating"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Failing again within the window: drained and held, not reset again.
	n.fault(t, "/xid?gpu=3&xid=79")
	n.waitQuarantine(t, 30*time.Second, true, gpunode.ReasonGPUHeld, fmt.Sprintf("GPU 3 (%s)", n.uuids[3]), "failed again", "failure 2")
	if events := n.nodeEvents(t); !slices.Contains(events, quarantine.ReasonFailedAgain) {
		t.Errorf("no %s event; events: %v", quarantine.ReasonFailedAgain, events)
	}
	n.waitGPUs(t, 8, 7)
}

// TestResetFailureAndSchedulers: GPU 3 falls off the bus and its reset
// fails. It stays quarantined and the condition says why; the node keeps
// the taint and offers 7 GPUs; neither kube-scheduler nor
// gpuplane-scheduler places a pod on it. Once the reset works again, the
// retry returns the GPU, the taint goes, and both pods are bound.
func TestResetFailureAndSchedulers(t *testing.T) {
	n := startNode(t, "q-reset", fmt.Sprintf(fastQuarantine, "20s"))
	ns := env.CreateNamespace(t)
	stop := runGPUplaneScheduler(t)
	defer stop()
	n.fault(t, "/fail?op=ResetGPU&gpu=3&message=the+driver+refused+the+reset")
	n.fault(t, "/lose?gpu=3")
	n.waitQuarantine(t, 30*time.Second, true, gpunode.ReasonGPUHeld, fmt.Sprintf("GPU 3 (%s)", n.uuids[3]), "reset failed", "the driver refused the reset")
	n.waitGPUs(t, 8, 7)
	if events := n.nodeEvents(t); !slices.Contains(events, quarantine.ReasonResetFailed) || !slices.Contains(events, quarantine.ReasonHeld) {
		t.Errorf("events %v lack %s and %s", events, quarantine.ReasonResetFailed, quarantine.ReasonHeld)
	}

	pods := map[string]string{"by-kube-scheduler": corev1.DefaultSchedulerName, "by-gpuplane": "gpuplane-scheduler"}
	for name, scheduler := range pods {
		p := framework.Pod(ns, name).GPUs(1).SchedulerName(scheduler).NodeSelector("kubernetes.io/hostname", n.name).Obj()
		if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name := range pods {
		framework.Eventually(t, 60*time.Second, name+" unschedulable", func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Spec.NodeName != "" {
				t.Fatalf("%s was bound to %s while it is tainted", name, p.Spec.NodeName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, nil
				}
			}
			return false, fmt.Errorf("conditions %v", p.Status.Conditions)
		})
	}
	p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), "by-kube-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && !strings.Contains(c.Message, "untolerated taint") {
			t.Errorf("kube-scheduler does not give the taint as its reason: %q", c.Message)
		}
	}

	// The reset works again: the held GPU's retry resets, revalidates and
	// returns it, and both schedulers place their pods.
	n.fault(t, "/clear")
	n.waitQuarantine(t, 90*time.Second, false, gpunode.ReasonNoGPUQuarantined)
	n.waitGPUs(t, 8, 8)
	for name := range pods {
		framework.Eventually(t, 90*time.Second, name+" bound after the taint is lifted", func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return p.Spec.NodeName == n.name, fmt.Errorf("bound to %q", p.Spec.NodeName)
		})
	}
}

// TestGPUScopedFaultWithdrawsOnlyThatGPU: a double-bit ECC error (XID 48)
// on GPU 5 whose reset fails. The node is not tainted, only GPU 5 is
// withdrawn. Four one-GPU pods go through kube-scheduler first, then four
// through gpuplane-scheduler, which reads which GPU is out from the Node's
// quarantine record: seven run on the other GPUs, each of gpuplane's on the
// GPU it chose, the eighth waits, unschedulable, and once GPU 5 returns it
// gets it.
func TestGPUScopedFaultWithdrawsOnlyThatGPU(t *testing.T) {
	n := startNode(t, "q-gpu5", fmt.Sprintf(fastQuarantine, "20s"))
	ns := env.CreateNamespace(t)
	n.fault(t, "/fail?op=ResetGPU&gpu=5&message=the+driver+refused+the+reset")
	n.fault(t, "/xid?gpu=5&xid=48")
	n.waitQuarantine(t, 30*time.Second, false, gpunode.ReasonGPUHeld, fmt.Sprintf("GPU 5 (%s)", n.uuids[5]), "XID 48", "memory-uncorrectable")
	n.waitGPUs(t, 8, 7)
	stop := runGPUplaneScheduler(t)
	defer stop()
	for i := range 8 {
		scheduler := corev1.DefaultSchedulerName
		if i >= 4 {
			scheduler = "gpuplane-scheduler"
		}
		p := framework.Pod(ns, fmt.Sprintf("w-%d", i)).GPUs(1).SchedulerName(scheduler).NodeSelector("kubernetes.io/hostname", n.name).Obj()
		if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			// gpuplane-scheduler reads which GPUs kube-scheduler's pods
			// hold from the node's record of them; until the agent has
			// written it, it can only guess, and the node would give its
			// pods other GPUs than it chose.
			for k := range 4 {
				name := fmt.Sprintf("w-%d", k)
				env.WaitPodPhase(t, ns, name, corev1.PodRunning, 90*time.Second)
				framework.Eventually(t, 30*time.Second, name+"'s GPUs recorded by its node", func(ctx context.Context) (bool, error) {
					p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return false, err
					}
					return p.Annotations[gpupod.HeldAnnotation] != "", fmt.Errorf("annotations %v", p.Annotations)
				})
			}
		}
	}
	var waiting string
	framework.Eventually(t, 90*time.Second, "seven pods Running and one unschedulable", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running, unschedulable := 0, 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && p.Spec.NodeName == "" {
					unschedulable++
					waiting = p.Name
					if p.Spec.SchedulerName == corev1.DefaultSchedulerName && !strings.Contains(c.Message, "Insufficient "+gpunode.ResourceGPU) {
						t.Errorf("kube-scheduler's reason is not the withdrawn GPU: %q", c.Message)
					}
				}
			}
		}
		return running == 7 && unschedulable == 1, fmt.Errorf("%d Running, %d unschedulable", running, unschedulable)
	})
	held := n.podResources(t)
	for pod, ids := range held {
		if slices.Contains(ids, n.uuids[5]) {
			t.Fatalf("pod %s holds the quarantined GPU 5", pod)
		}
	}
	// gpuplane-scheduler's pods got the GPU it chose for them.
	for i := 4; i < 8; i++ {
		p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), fmt.Sprintf("w-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName == "" {
			continue
		}
		choice, err := gpupod.ParseGPUs(p.Annotations[gpupod.GPUsAnnotation], 8)
		if err != nil || len(choice) != 1 {
			t.Fatalf("pod %s: gpuplane-scheduler's choice %q: %v", p.Name, p.Annotations[gpupod.GPUsAnnotation], err)
		}
		if idx := choice[0].Index; idx == 5 || !slices.Equal(held[ns+"/"+p.Name], []string{n.uuids[idx]}) {
			t.Fatalf("pod %s: gpuplane-scheduler chose GPU %d, the node gave %v (GPU 5 is out)", p.Name, idx, held[ns+"/"+p.Name])
		}
	}
	node, err := n.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if tn, has := taint(node); has {
		t.Fatalf("a GPU-scoped fault tainted the node: %v", tn)
	}
	// The reset works again: GPU 5 returns and the waiting pod gets it.
	n.fault(t, "/clear")
	n.waitQuarantine(t, 90*time.Second, false, gpunode.ReasonNoGPUQuarantined)
	env.WaitPodPhase(t, ns, waiting, corev1.PodRunning, 90*time.Second)
	if ids := n.podResources(t)[ns+"/"+waiting]; !slices.Equal(ids, []string{n.uuids[5]}) {
		t.Fatalf("the waiting pod %s got %v, want GPU 5 (%s)", waiting, ids, n.uuids[5])
	}
}

// TestAgentRestartResumesTheQuarantine: the agent is killed while GPU 3 is
// held. The Node keeps its taint and condition meanwhile, and the restarted
// agent takes the quarantine up from the Node's record: GPU 3 stays out of
// service until its retry resets, revalidates and returns it.
func TestAgentRestartResumesTheQuarantine(t *testing.T) {
	n := startNode(t, "q-restart", fmt.Sprintf(fastQuarantine, "30s"))
	n.fault(t, "/fail?op=ResetGPU&gpu=3")
	n.fault(t, "/lose?gpu=3")
	n.waitQuarantine(t, 30*time.Second, true, gpunode.ReasonGPUHeld, fmt.Sprintf("GPU 3 (%s)", n.uuids[3]), "reset failed")
	pid := n.sim.AgentPid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the agent (pid %d): %v", pid, err)
	}
	framework.Eventually(t, 60*time.Second, "the agent restarted", func(context.Context) (bool, error) {
		restarts, _ := n.sim.AgentRestarts()
		return restarts >= 1, fmt.Errorf("%d restarts", restarts)
	})
	framework.Eventually(t, 60*time.Second, "the restarted agent resumes the quarantine", func(context.Context) (bool, error) {
		events := n.nodeEvents(t)
		return slices.Contains(events, quarantine.ReasonResumed), fmt.Errorf("events %v", events)
	})
	// Still out of service: tainted, held, GPU 3 withdrawn.
	node := n.waitQuarantine(t, 10*time.Second, true, gpunode.ReasonGPUHeld, fmt.Sprintf("GPU 3 (%s)", n.uuids[3]))
	if a := node.Status.Allocatable[gpunode.ResourceGPU]; a.Value() != 7 {
		n.waitGPUs(t, 8, 7)
	}
	// The retry (30s after it was held, kept across the restart) resets
	// the GPU, the restarted simulated node's reset works, and it returns.
	n.waitQuarantine(t, 90*time.Second, false, gpunode.ReasonNoGPUQuarantined)
	n.waitGPUs(t, 8, 8)
}

// scrape reads the agent's /metrics.
func (n *simNode) scrape(t testing.TB) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, n.sim.AgentMetricsURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping the agent: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
