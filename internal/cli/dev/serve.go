package dev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/deploy/admission"
	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/nodesim"
)

// Labels of the nodes `dev up` creates.
const (
	// NodeKindLabel says how a dev node is simulated: "agent" (a node
	// simulator running gpuplane-agent) or "kwok".
	NodeKindLabel = "gpuplane.io/dev-node"
	// ProfileLabel records the node's profile argument.
	ProfileLabel = "gpuplane.io/dev-profile"
)

// LifelineEnv, when set to a pid, makes the supervisor stop the cluster as
// soon as that process is gone. Tests set it to their own pid, so that a
// test binary killed mid-way (a timeout) leaves no cluster behind.
const LifelineEnv = "GPUPLANE_DEV_LIFELINE_PID"

// watchLifeline returns a context that ends with ctx or when the process
// pid (when not empty) exits.
func watchLifeline(ctx context.Context, pid string) (context.Context, error) {
	if pid == "" {
		return ctx, nil
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("%s=%q: want a process id", LifelineEnv, pid)
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for processAlive(n) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ctx, nil
}

// supervisor runs the cluster for `dev serve`.
type supervisor struct {
	dir      stateDir
	spec     *Spec
	log      *slog.Logger
	progress *os.File

	mu        sync.Mutex
	state     State
	cp        *localcluster.ControlPlane
	sims      []*nodesim.Simulator
	scheduler *localcluster.Child
	operators []*localcluster.Operator
}

// serve runs the supervisor until SIGTERM or SIGINT, then stops everything.
func serve(dir stateDir) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, err := watchLifeline(ctx, os.Getenv(LifelineEnv))
	if err != nil {
		return err
	}
	spec, err := dir.readSpec()
	if err != nil {
		return err
	}
	progress, err := os.OpenFile(dir.path(progressFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening the progress file: %w", err)
	}
	defer func() { _ = progress.Close() }()
	s := &supervisor{
		dir: dir, spec: spec, progress: progress,
		log:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		state: State{Phase: PhaseStarting, Pid: os.Getpid(), Pids: map[string]int{}, Metrics: map[string]string{}, Faults: map[string]string{}, Logs: map[string]string{}},
	}
	if err := s.writeState(); err != nil {
		return err
	}
	startErr := s.start(ctx)
	if startErr != nil {
		s.step("failed: %v", startErr)
		s.mu.Lock()
		s.state.Phase, s.state.Error = PhaseFailed, startErr.Error()
		s.mu.Unlock()
		_ = s.writeState()
	} else {
		s.mu.Lock()
		s.state.Phase = PhaseReady
		s.mu.Unlock()
		if err := s.writeState(); err != nil {
			startErr = err
		} else {
			s.step("ready")
			<-ctx.Done()
		}
	}
	s.mu.Lock()
	if s.state.Phase != PhaseFailed {
		s.state.Phase = PhaseStopping
	}
	s.mu.Unlock()
	_ = s.writeState()
	stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return errors.Join(startErr, s.stop(stopCtx))
}

// step records a progress line for `dev up` to show.
func (s *supervisor) step(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Info(msg)
	_, _ = fmt.Fprintln(s.progress, msg)
}

func (s *supervisor) writeState() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.writeState(&s.state)
}

// start brings the cluster up and returns when every node is Ready with
// its GPU resources.
func (s *supervisor) start(ctx context.Context) error {
	started := time.Now()
	sched := s.spec.Scheduler != SchedulerNone
	s.step("starting the control plane (etcd, kube-apiserver, kube-controller-manager%s%s)",
		map[bool]string{true: ", kube-scheduler"}[sched], map[bool]string{true: ", kwok"}[s.spec.KwokNodes > 0 || s.spec.Karpenter != nil])
	cp, err := localcluster.Start(ctx, localcluster.Config{
		BinDir: s.spec.BinDir, Dir: s.dir.path("controlplane"), KeepDir: true,
		ControllerManager: true, Scheduler: sched, Kwok: s.spec.KwokNodes > 0 || s.spec.Karpenter != nil,
		Logger: s.log.With("part", "controlplane"),
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cp = cp
	s.state.APIServer = cp.APIServerURL()
	for name, pid := range cp.Pids() {
		s.state.Pids[name] = pid
		s.state.Logs[name] = cp.LogPath(name)
	}
	s.mu.Unlock()
	kubeconfig, err := os.ReadFile(cp.Kubeconfig())
	if err != nil {
		return fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	if err := writeFileAtomic(s.dir.path(kubeconfigFile), kubeconfig); err != nil {
		return err
	}
	s.mu.Lock()
	s.state.Kubeconfig = s.dir.path(kubeconfigFile)
	s.mu.Unlock()
	if err := s.writeState(); err != nil {
		return err
	}
	s.step("control plane ready at %s (%.1fs)", cp.APIServerURL(), time.Since(started).Seconds())

	client, err := kubernetes.NewForConfig(clientConfig(cp.RESTConfig()))
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	// The operators start while gpuplane and the nodes do: each needs only
	// the API server, and installing their large CRDs is most of their
	// start.
	opCtx, cancelOps := context.WithCancel(ctx)
	defer cancelOps()
	operatorsDone := make(chan error, 1)
	go func() { operatorsDone <- s.startOperators(opCtx, cp) }()
	stopOperators := func(err error) error {
		cancelOps()
		if opErr := <-operatorsDone; opErr != nil && !errors.Is(opErr, context.Canceled) {
			return errors.Join(err, opErr)
		}
		return err
	}
	chart := s.spec.Install == InstallChart
	if chart {
		if err := s.installChart(ctx, cp); err != nil {
			return stopOperators(err)
		}
	}
	if s.spec.Scheduler == SchedulerGPUPlane {
		if !chart {
			if err := s.startGPUPlaneScheduler(ctx, cp); err != nil {
				return stopOperators(err)
			}
		}
		s.step("waiting for the API server to enforce the admission policies")
		if err := waitAdmission(ctx, client); err != nil {
			return stopOperators(err)
		}
	}
	if s.spec.DRA {
		if err := s.installDeviceClasses(ctx, client); err != nil {
			return stopOperators(err)
		}
	}
	if err := s.startNodes(ctx, cp, client, chart); err != nil {
		return stopOperators(err)
	}
	if err := <-operatorsDone; err != nil {
		return err
	}
	if s.spec.Karpenter != nil {
		if err := s.startKarpenter(ctx, cp); err != nil {
			return err
		}
	}
	s.step("cluster up in %.1fs", time.Since(started).Seconds())
	return nil
}

// startNodes starts the simulated nodes and the kwok nodes and waits until
// every node is Ready with its GPUs.
func (s *supervisor) startNodes(ctx context.Context, cp *localcluster.ControlPlane, client kubernetes.Interface, chart bool) error {
	if !chart && len(s.spec.Nodes) > 0 {
		if err := ensureMIGConfigMap(ctx, client); err != nil {
			return err
		}
	}
	// Every agent's fault controls' and metrics' ports, found together so
	// that no two are the same.
	var addrs []string
	if !chart {
		var err error
		if addrs, err = freeLoopbackAddrs(2 * len(s.spec.Nodes)); err != nil {
			return err
		}
	}
	for i, n := range s.spec.Nodes {
		cfg := nodesim.Config{
			NodeName: n.Name, Dir: s.dir.path(filepath.Join("n", strconv.Itoa(i))), Client: client,
			Labels: map[string]string{NodeKindLabel: "agent", ProfileLabel: labelValue(n.Profile)},
			Logger: s.log.With("part", "nodesim"),
		}
		maps.Copy(cfg.Labels, n.Labels)
		if chart {
			s.step("starting node %s (%s): it runs the chart's pods", n.Name, n.Profile)
			s.chartNode(&cfg, n, cp)
		} else {
			s.step("starting node %s (%s) with gpuplane-agent", n.Name, n.Profile)
			control := addrs[2*i]
			cfg.Agent = &nodesim.AgentConfig{
				Binary: s.spec.AgentBinary, Profile: n.SimProfile, ConfigFile: n.AgentConfig, MetricsAddr: addrs[2*i+1],
				Kubeconfig: cp.Kubeconfig(), LogPath: s.dir.path("agent-" + n.Name + ".log"), DRA: s.spec.DRA,
				// gpuplane dev fault reaches the simulated GPUs at the
				// control address; declarative MIG is on, as the chart
				// turns it on.
				ExtraArgs: []string{"--simulate-control-addr", control,
					"--mig-config-map", helmchart.DefaultNamespace + "/" + helmchart.MIGConfigMap},
			}
			if n.Fabric != "" {
				cfg.Agent.ExtraArgs = append(cfg.Agent.ExtraArgs, "--simulate-fabric", n.Fabric)
			}
			s.mu.Lock()
			s.state.Faults[n.Name] = control
			s.mu.Unlock()
		}
		sim, err := nodesim.Start(ctx, cfg)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.sims = append(s.sims, sim)
		if !chart {
			s.state.Pids["gpuplane-agent/"+n.Name] = sim.AgentPid()
			s.state.Logs["gpuplane-agent/"+n.Name] = s.dir.path("agent-" + n.Name + ".log")
			if u := sim.AgentMetricsURL(); u != "" {
				s.state.Metrics[n.Name] = u
			}
		}
		s.mu.Unlock()
		if err := s.writeState(); err != nil {
			return err
		}
	}
	if s.spec.KwokNodes > 0 {
		s.step("creating %d kwok GPU nodes (%d x %s each)", s.spec.KwokNodes, s.spec.KwokGPUs, s.spec.KwokProduct)
		if err := createKwokNodes(ctx, client, s.spec); err != nil {
			return err
		}
	}
	s.step("waiting for %d nodes to be Ready with their GPUs", len(s.spec.Nodes)+s.spec.KwokNodes)
	if err := s.waitNodes(ctx, client); err != nil {
		return err
	}
	if chart {
		s.step("waiting for the chart's agent and scheduler pods to be Ready")
		if err := s.waitChartPods(ctx, client); err != nil {
			return err
		}
	}
	return nil
}

// startOperators starts the workload operators of --operators, all at
// once (each installs its CRDs and waits for its readiness).
func (s *supervisor) startOperators(ctx context.Context, cp *localcluster.ControlPlane) error {
	errs := make([]error, len(s.spec.Operators))
	var wg sync.WaitGroup
	for i, name := range s.spec.Operators {
		wg.Go(func() { errs[i] = s.startOperator(ctx, cp, name) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *supervisor) startOperator(ctx context.Context, cp *localcluster.ControlPlane, name string) error {
	started := time.Now()
	s.step("starting workload operator %s", name)
	op, err := localcluster.StartOperator(ctx, localcluster.OperatorConfig{
		Name: name, Dir: s.spec.OperatorsDir,
		RESTConfig: clientConfig(cp.RESTConfig()), Kubeconfig: cp.Kubeconfig(),
		WorkDir: s.dir.path(filepath.Join("operators", name)),
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.operators = append(s.operators, op)
	s.state.Pids[operatorComponent(name)] = op.Pid()
	s.state.Logs[operatorComponent(name)] = op.LogPath()
	s.mu.Unlock()
	if err := s.writeState(); err != nil {
		return err
	}
	s.step("workload operator %s ready (%.1fs; CRDs %s)", name, time.Since(started).Seconds(), strings.Join(op.CRDs(), ", "))
	return nil
}

// operatorComponent names an operator among the cluster's processes.
func operatorComponent(name string) string { return "operator/" + name }

// startGPUPlaneScheduler runs gpuplane-scheduler against the cluster.
func (s *supervisor) startGPUPlaneScheduler(ctx context.Context, cp *localcluster.ControlPlane) error {
	s.step("installing the Queue, PodGroup, GroupingRule and Topology CRDs")
	// Polled until Established: `kubectl wait` fails instead of waiting on
	// a CRD the API server has not given conditions yet, which happens
	// when it is busy (with operators' CRDs, for one).
	dyn, err := dynamic.NewForConfig(clientConfig(cp.RESTConfig()))
	if err != nil {
		return err
	}
	crdCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := localcluster.InstallCRDs(crdCtx, dyn, s.spec.CRDDir); err != nil {
		return err
	}
	kubectl := filepath.Join(s.spec.BinDir, localcluster.BinKubectl)
	// The admission policies that let pods written for other GPU
	// schedulers run as written (deploy/admission).
	s.step("installing the admission policies for pods written for other GPU schedulers")
	policies, err := writeEmbedded(admission.Files, s.dir.path("admission"), "admission policies")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, kubectl, "apply", "-f", policies, "--kubeconfig", cp.Kubeconfig())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply -f %s: %w: %s", policies, err, strings.TrimSpace(string(out)))
	}
	s.step("starting gpuplane-scheduler")
	logPath := s.dir.path("gpuplane-scheduler.log")
	args := []string{"--kubeconfig", cp.Kubeconfig(), "--leader-elect=false", "--serve-address", ""}
	if s.spec.Karpenter != nil {
		// Karpenter adds nodes: a gang larger than the cluster waits for room.
		args = append(args, "--node-autoscaler")
	}
	child, err := localcluster.StartChild("gpuplane-scheduler", s.spec.SchedulerBinary, args, logPath)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.scheduler = child
	s.state.Pids["gpuplane-scheduler"] = child.Pid()
	s.state.Logs["gpuplane-scheduler"] = logPath
	s.mu.Unlock()
	return nil
}

// clientConfig raises the client's rate limits: creating a hundred kwok
// nodes should not queue behind client-go's default 5 QPS.
func clientConfig(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.QPS, c.Burst = 500, 1000
	return c
}

// waitNodes polls until every node is Ready and each simulated node reports
// its resources and its agent's GPUReady condition is True.
func (s *supervisor) waitNodes(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	want := len(s.spec.Nodes) + s.spec.KwokNodes
	last := ""
	for {
		ready, missing, err := s.countReady(ctx, client)
		if err == nil && ready == want && missing == "" {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d of %d nodes Ready%s", ready, want, missing)
		}
		if s.spec.Install == InstallChart {
			if err := s.chartCrashes(ctx, client); err != nil {
				return err
			}
		}
		for _, sim := range s.sims {
			if n, exit := sim.AgentRestarts(); n > 0 || exit != nil {
				return fmt.Errorf("the gpuplane-agent of node %s exited during start-up (%w); see %s",
					sim.NodeName(), exit, s.dir.path("agent-"+sim.NodeName()+".log"))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the nodes: %w (%s)", ctx.Err(), last)
		case <-ticker.C:
		}
	}
}

func (s *supervisor) countReady(ctx context.Context, client kubernetes.Interface) (int, string, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeKindLabel, ResourceVersion: "0"})
	if err != nil {
		return 0, "", err
	}
	byName := map[string]*corev1.Node{}
	ready := 0
	for i := range list.Items {
		n := &list.Items[i]
		byName[n.Name] = n
		if nodeReady(n) {
			ready++
		}
	}
	missing := ""
	for _, spec := range s.spec.Nodes {
		n, ok := byName[spec.Name]
		if !ok {
			return ready, "; node " + spec.Name + " missing", nil
		}
		for _, r := range spec.Resources {
			if q := n.Status.Allocatable[corev1.ResourceName(r)]; q.Value() == 0 {
				missing = fmt.Sprintf("; node %s has no %s yet", spec.Name, r)
			}
		}
		// The agent's own word that the node's GPUs are on offer.
		if c := nodeCondition(n, gpunode.ConditionGPUReady); c == nil {
			missing = fmt.Sprintf("; node %s: gpuplane-agent has not written %s yet", spec.Name, gpunode.ConditionGPUReady)
		} else if c.Status != corev1.ConditionTrue {
			missing = fmt.Sprintf("; node %s: %s %s: %s", spec.Name, gpunode.ConditionGPUReady, c.Reason, c.Message)
		}
	}
	return ready, missing, nil
}

func nodeReady(n *corev1.Node) bool {
	c := nodeCondition(n, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// nodeCondition returns the node's condition of type typ, nil without one.
func nodeCondition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// createKwokNodes creates the kwok GPU nodes, capacity written directly.
func createKwokNodes(ctx context.Context, client kubernetes.Interface, spec *Spec) error {
	gpus := *resource.NewQuantity(int64(spec.KwokGPUs), resource.DecimalSI)
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("224"), corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"), gpunode.ResourceGPU: gpus,
	}
	sem := make(chan struct{}, 32)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range spec.KwokNodes {
		name := fmt.Sprintf("kwok-gpu-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				Labels: map[string]string{
					corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
					NodeKindLabel: "kwok", "type": "kwok",
					"nvidia.com/gpu.product": spec.KwokProduct, "nvidia.com/gpu.count": strconv.Itoa(spec.KwokGPUs),
					"nvidia.com/gpu.present": "true",
				},
				Annotations: map[string]string{localcluster.KwokNodeAnnotation: localcluster.KwokNodeAnnotationValue},
			},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: localcluster.KwokNodeAnnotation, Value: localcluster.KwokNodeAnnotationValue, Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Capacity: res.DeepCopy(), Allocatable: res.DeepCopy()},
		}
		if spec.Layout != nil {
			maps.Copy(node.Labels, spec.Layout.Place(len(spec.Nodes)+i).Labels())
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("creating kwok node %s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stop stops the nodes (and their agents), the operators, the scheduler
// and the control plane, and waits until every process is gone.
func (s *supervisor) stop(ctx context.Context) error {
	s.mu.Lock()
	sims, sched, ops, cp := s.sims, s.scheduler, s.operators, s.cp
	s.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, sim := range sims {
		wg.Go(func() {
			if err := sim.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	for _, op := range ops {
		wg.Go(func() {
			if err := op.Stop(ctx, 10*time.Second); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if sched != nil {
		if err := sched.Stop(ctx, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if cp != nil {
		if err := cp.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// labelValue makes a profile argument a valid label value.
func labelValue(s string) string {
	out := []rune{}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			out = append(out, r)
		default:
			out = append(out, '_')
		}
	}
	if len(out) > 63 {
		out = out[len(out)-63:]
	}
	return strings.Trim(string(out), "-_.")
}
