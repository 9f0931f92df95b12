package dev

import (
	"bufio"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/deploy/crds"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// NewCommand returns `gpuplane dev` with up, down, status and the hidden
// serve.
func NewCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster with simulated GPU nodes: dev up | down | status | fault",
		Long: `dev runs a local Kubernetes cluster for trying gpuplane without a cluster
or a GPU: etcd, kube-apiserver, kube-controller-manager and a scheduler built
from their Go modules (make controlplane-bins), simulated DGX nodes each
running the real gpuplane-agent against a simulated kubelet, and optionally
many kwok nodes with GPU capacity for scale.

The cluster runs in the background under a supervisor process until
'gpuplane dev down'. Its state (pid file, kubeconfig, logs) lives in
--state-dir: $` + StateDirEnv + `, else $XDG_RUNTIME_DIR/gpuplane-dev, else
~/.gpuplane/dev.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&dir, "state-dir", "", "directory for the cluster's pid file, kubeconfig and logs (default $"+StateDirEnv+", $XDG_RUNTIME_DIR/gpuplane-dev or ~/.gpuplane/dev)")
	resolve := func() (stateDir, error) {
		d := dir
		if d == "" {
			d = defaultStateDir()
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", cliutil.Usagef("--state-dir %q: %w", d, err)
		}
		return stateDir(abs), nil
	}
	cmd.AddCommand(newUpCommand(resolve), newDownCommand(resolve), newStatusCommand(resolve), newFaultCommand(resolve), newServeCommand(resolve))
	return cmd
}

type upFlags struct {
	nodes        int
	profile      string
	nodeProfiles []string
	kwokNodes    int
	kwokProduct  string
	kwokGPUs     int
	scheduler    string
	install      string
	binDir       string
	agentBinary  string
	crdDir       string
	operators    []string
	operatorsDir string
	timeout      time.Duration
	dra          bool
	topology     string
	// karpenterPools and karpenterIdle: --karpenter-pools, --karpenter-idle.
	karpenterPools []string
	karpenterIdle  time.Duration
}

func newUpCommand(resolve func() (stateDir, error)) *cobra.Command {
	f := &upFlags{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the local cluster in the background and print how to use it",
		Long: `up starts the control plane, the simulated GPU nodes (each with its own
gpuplane-agent) and the scheduler in the background, waits until every node is
Ready with its GPU resources and its agent says so (the GPUReady condition),
and prints the kubeconfig to use.

A node profile is PROFILE[:MODE]: PROFILE a simulated system (the DGX
systems dgxa100, dgxh100, dgxh200, dgxb200; the NVL72 compute trays
gb200-nvl72, gb300-nvl72; the rented servers 4xt4, 8xv100,
4xa10g, 8xl4, 8xl40s, 8xa100-80gb, 8xh100-pcie; or a profile file), MODE one of
  whole                 every GPU a nvidia.com/gpu (default)
  mig-mixed             GPU 0 split into seven 1-slice MIG devices, GPU 1 into
                        two 3-slice ones, the agent in mixed strategy
                        (nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb on H100)
  mig-dynamic           GPUs 0 and 1 in MIG mode with no MIG devices: the DRA
                        driver creates them for the claims that ask
  time-slicing[=N]      every GPU shared N ways (default 4)

With --dra (the default) every agent also runs as the DRA driver
gpu.gpuplane.io beside its device plugin, over one ledger: ResourceSlices
describe each node's GPUs and MIG profiles, gpuplane's DeviceClasses are
installed (gpu.gpuplane.io, mig.gpu.gpuplane.io, mig-<profile>.gpu.gpuplane.io),
and the simulated nodes prepare the claims of the pods bound to them.

--operators runs workload operators beside the scheduler, as processes of
the cluster, so their workloads (PyTorchJob, RayCluster, JobSet, ...) run as
users submit them: ` + strings.Join(localcluster.Operators(), ", ") + `.
make operator-bins builds them into bin/operators; up installs their CRDs and
what their own installation would make (a namespace, the Secret and webhook
configuration the training operator updates, serving certificates) and
waits until each is ready.

--karpenter-pools runs Karpenter with its kwok cloud provider and one
NodePool per INSTANCE-TYPE=PROFILE[:MODE]: gpuplane works out what a node of
that profile and mode will offer once its agent runs (its GPU feature labels,
its nvidia.com/gpu, MIG or time-sliced resources), writes it into the pool's
node template and the instance type, and Karpenter buys such nodes for pods
that wait for room and takes them away --karpenter-idle after they empty.
Pods that wait for their queue's quota or for the rest of their gang buy
nothing.

--topology lays the nodes out in spine blocks and racks (leaf switches), and
with nvl72 makes each rack a GB200 or GB300 NVL72 rack, one NVLink domain:
the simulated nodes must be its compute trays (gb200-nvl72, gb300-nvl72), each
agent's simulated GPUs report the rack's NVLink fabric and the agent labels
nvidia.com/gpu.clique from it, as on real racks; kwok nodes get the same labels
written (and default to 4 x NVIDIA-GB200). A Topology naming the levels
` + LabelTopologyBlock + `, ` + LabelTopologyRack + `, nvidia.com/gpu.clique and
kubernetes.io/hostname then places gangs by them.`,
		Example: `  gpuplane dev up
  gpuplane dev up --nodes 2 --profile dgxh100 --kwok-nodes 100
  gpuplane dev up --node-profiles dgxh100,dgxh100:mig-mixed,dgxh100:time-slicing=4
  gpuplane dev up --node-profiles dgxh100,dgxh100:mig-dynamic
  gpuplane dev up --scheduler none
  gpuplane dev up --operators training-operator,kuberay
  gpuplane dev up --nodes 0 --karpenter-pools h100x8=dgxh100,h100x8-ts4=dgxh100:time-slicing=4
  gpuplane dev up --install chart --node-profiles dgxh100,dgxh100:mig-mixed
  gpuplane dev up --nodes 8 --topology blocks=2,racks=2,rack-nodes=2
  gpuplane dev up --nodes 4 --profile gb200-nvl72 --kwok-nodes 32 --topology rack-nodes=18,nvl72`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := resolve()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("nodes") && len(f.nodeProfiles) > 0 {
				f.nodes = 0
			}
			if nvl72Layout(f.topology) {
				// kwok nodes in NVL72 racks are compute trays too.
				if !cmd.Flags().Changed("kwok-product") {
					f.kwokProduct = kwokNVL72Product
				}
				if !cmd.Flags().Changed("kwok-gpus") {
					f.kwokGPUs = sim.NVL72TrayGPUs
				}
			}
			return up(cmd.Context(), dir, f, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 1, "number of simulated GPU nodes running gpuplane-agent with --profile")
	fs.StringVar(&f.profile, "profile", "dgxh100", "node profile of the --nodes nodes, PROFILE[:MODE]")
	fs.StringSliceVar(&f.nodeProfiles, "node-profiles", nil, "one more simulated node per entry, each PROFILE[:MODE], comma-separated (with no --nodes, only these)")
	fs.IntVar(&f.kwokNodes, "kwok-nodes", 0, "number of kwok GPU nodes (capacity written directly, no agent; tainted kwok.x-k8s.io/node=fake:NoSchedule)")
	fs.StringVar(&f.kwokProduct, "kwok-product", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.product label of the kwok nodes")
	fs.IntVar(&f.kwokGPUs, "kwok-gpus", 8, "nvidia.com/gpu capacity of each kwok node")
	fs.StringVar(&f.scheduler, "scheduler", SchedulerGPUPlane, "scheduler to run: gpuplane (gpuplane-scheduler for pods with schedulerName gpuplane-scheduler, kube-scheduler for the rest; installs gpuplane's CRDs and admission policies), kube-scheduler (alone) or none")
	fs.StringVar(&f.install, "install", InstallProcesses, "how gpuplane is installed: "+InstallProcesses+" (the supervisor runs an agent per node and the scheduler) or "+InstallChart+" (gpuplane's Helm chart, installed with Helm's Go SDK: its objects go through the API server, and the simulated nodes run its agent and scheduler pods from the chart's pod specs, under the chart's RBAC; needs --scheduler gpuplane)")
	fs.StringVar(&f.crdDir, "crd-dir", "", "with --scheduler gpuplane: directory of the Queue and PodGroup CRDs (default: deploy/crds beside bin/, else the ones built into gpuplane)")
	fs.StringVar(&f.binDir, "bin-dir", "", "directory of the control-plane binaries (default $"+localcluster.BinDirEnv+", else the checkout's bin/)")
	fs.StringVar(&f.agentBinary, "agent-binary", "", "gpuplane-agent to run on the simulated nodes (default: beside this binary, else on $PATH)")
	fs.StringSliceVar(&f.operators, "operators", nil, "workload operators to run beside the scheduler, comma-separated: "+strings.Join(localcluster.Operators(), ", ")+" (built by make operator-bins)")
	fs.StringVar(&f.operatorsDir, "operators-dir", "", "directory of the workload operators and their CRDs (default: operators/ in the control-plane binaries' directory)")
	fs.DurationVar(&f.timeout, "timeout", 3*time.Minute, "how long to wait for the cluster to come up")
	fs.StringVar(&f.topology, "topology", "", topologyHelp)
	fs.StringSliceVar(&f.karpenterPools, "karpenter-pools", nil, "run Karpenter (kwok provider, built by make operator-bins) with one NodePool per entry INSTANCE-TYPE=PROFILE[:MODE], comma-separated: its nodes offer what a simulated node of that profile offers (GPU feature labels, GPU resources), and it buys them for pods that wait for room")
	fs.DurationVar(&f.karpenterIdle, "karpenter-idle", 30*time.Second, "with --karpenter-pools: how long a node stays empty or underused before Karpenter takes it away (the pools' consolidateAfter)")
	fs.BoolVar(&f.dra, "dra", true, "run every agent's DRA driver (gpu.gpuplane.io: ResourceSlices, claims prepared as CDI devices) beside its device plugin and install gpuplane's DeviceClasses; not with --install chart")
	return cmd
}

// up validates the flags, refuses to start a second cluster, starts the
// supervisor and follows its progress until the cluster is ready.
func up(ctx context.Context, dir stateDir, f *upFlags, out io.Writer) error {
	pid, err := dir.readPid()
	if err != nil {
		return err
	}
	if supervisorAlive(pid) {
		return fmt.Errorf("a dev cluster is already running (supervisor pid %d, state in %s, KUBECONFIG=%s); use `gpuplane dev down` to stop it first",
			pid, dir, dir.path(kubeconfigFile))
	}
	spec, err := resolveSpec(f)
	if err != nil {
		return err
	}
	if pid != 0 || exists(string(dir)) {
		if err := cleanStale(dir, out); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(string(dir), 0o750); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	if spec.Scheduler == SchedulerGPUPlane && spec.CRDDir == "" {
		if spec.CRDDir, err = writeEmbeddedCRDs(dir.path("crds")); err != nil {
			_ = os.RemoveAll(string(dir))
			return err
		}
	}
	for i, arg := range nodeArgs(f) {
		name := fmt.Sprintf("gpu-node-%d", i+1)
		n, err := prepareNode(ctx, name, arg, dir.path(filepath.Join("nodes", name)))
		if err != nil {
			_ = os.RemoveAll(string(dir))
			return err
		}
		if spec.Layout != nil {
			p := spec.Layout.Place(i)
			n.Labels, n.Fabric = p.Labels(), p.Fabric
			// The agent labels the clique from its GPUs.
			delete(n.Labels, gpunode.LabelGPUClique)
		}
		spec.Nodes = append(spec.Nodes, n)
	}
	if len(f.karpenterPools) > 0 {
		if spec.Karpenter, err = prepareKarpenter(ctx, f, dir.path("karpenter")); err != nil {
			_ = os.RemoveAll(string(dir))
			return err
		}
	}
	if err := dir.writeSpec(spec); err != nil {
		return err
	}
	child, err := startSupervisor(dir)
	if err != nil {
		_ = os.RemoveAll(string(dir))
		return err
	}
	fmt.Fprintf(out, "starting a dev cluster (supervisor pid %d, state in %s)\n", child, dir)
	st, err := follow(ctx, dir, child, f.timeout, out)
	if err != nil {
		fmt.Fprintf(out, "start-up failed; stopping what was started\n")
		stopErr := down(context.Background(), dir, io.Discard, 2*time.Minute)
		return errors.Join(fmt.Errorf("%w (supervisor log: %s)", err, dir.path(supervisorLog)), stopErr)
	}
	kubectl := filepath.Join(spec.BinDir, localcluster.BinKubectl)
	fmt.Fprintf(out, "\nThe dev cluster is up.\n\n  export KUBECONFIG=%s\n  %s get nodes\n\nStop it with: gpuplane dev down\n", st.Kubeconfig, kubectl)
	return nil
}

// nodeArgs lists the profile argument of each simulated node.
func nodeArgs(f *upFlags) []string {
	var out []string
	for range f.nodes {
		out = append(out, f.profile)
	}
	return append(out, f.nodeProfiles...)
}

// resolveSpec checks the flags and finds the binaries.
func resolveSpec(f *upFlags) (*Spec, error) {
	if f.nodes < 0 || f.kwokNodes < 0 || f.kwokGPUs < 0 {
		return nil, cliutil.Usagef("--nodes, --kwok-nodes and --kwok-gpus must not be negative")
	}
	if f.nodes+len(f.nodeProfiles)+f.kwokNodes == 0 && len(f.karpenterPools) == 0 {
		return nil, cliutil.Usagef("no nodes: give --nodes N, --node-profiles, --kwok-nodes or --karpenter-pools")
	}
	for _, arg := range f.karpenterPools {
		if _, _, err := parsePool(arg); err != nil {
			return nil, err
		}
	}
	if f.karpenterIdle < 0 {
		return nil, cliutil.Usagef("--karpenter-idle must not be negative, got %v", f.karpenterIdle)
	}
	for _, arg := range nodeArgs(f) {
		if _, _, _, err := parseNodeProfile(arg); err != nil {
			return nil, err
		}
	}
	spec := &Spec{Install: f.install, Scheduler: f.scheduler, KwokNodes: f.kwokNodes, KwokProduct: f.kwokProduct, KwokGPUs: f.kwokGPUs, DRA: f.dra && f.install == InstallProcesses}
	if f.topology != "" {
		layout, err := resolveLayout(f)
		if err != nil {
			return nil, err
		}
		spec.Layout = layout
	}
	switch f.install {
	case InstallProcesses:
	case InstallChart:
		if f.scheduler != SchedulerGPUPlane {
			return nil, cliutil.Usagef("--install %s installs gpuplane-scheduler from the chart: it needs --scheduler %s, not %q", InstallChart, SchedulerGPUPlane, f.scheduler)
		}
	default:
		return nil, cliutil.Usagef("--install %q: want %s or %s", f.install, InstallProcesses, InstallChart)
	}
	cpCfg := localcluster.Config{BinDir: defaultBinDir(f.binDir), ControllerManager: true, Kwok: f.kwokNodes > 0 || len(f.karpenterPools) > 0}
	switch f.scheduler {
	case SchedulerKube:
		cpCfg.Scheduler = true
	case SchedulerNone:
	case SchedulerGPUPlane:
		// gpuplane-scheduler serves the pods that name it; kube-scheduler
		// stays the default scheduler, as in a real cluster.
		cpCfg.Scheduler = true
		bin, err := findBinary("gpuplane-scheduler", "")
		if err != nil {
			return nil, fmt.Errorf("--scheduler gpuplane: %w; build it with `make build` or use --scheduler kube-scheduler", err)
		}
		spec.SchedulerBinary = bin
	default:
		return nil, cliutil.Usagef("--scheduler %q: want kube-scheduler, gpuplane or none", f.scheduler)
	}
	binDir, err := localcluster.VerifyBinaries(cpCfg)
	if err != nil {
		return nil, err
	}
	spec.BinDir = binDir
	if f.scheduler == SchedulerGPUPlane {
		crds := f.crdDir
		if crds == "" {
			// bin/ sits at the checkout's root, beside deploy/. Without a
			// checkout, up writes the CRDs built into this binary.
			crds = filepath.Join(binDir, "..", "deploy", "crds")
			if _, err := os.Stat(filepath.Join(crds, queueCRDFile)); err != nil {
				crds = ""
			}
		}
		if crds != "" {
			if _, err := os.Stat(filepath.Join(crds, queueCRDFile)); err != nil {
				return nil, cliutil.Usagef("--crd-dir: %v; want the directory of the Queue and PodGroup CRDs (the checkout's deploy/crds)", err)
			}
			if spec.CRDDir, err = filepath.Abs(crds); err != nil {
				return nil, err
			}
		}
	}
	if err := resolveOperators(spec, f); err != nil {
		return nil, err
	}
	if f.nodes+len(f.nodeProfiles) > 0 {
		if spec.AgentBinary, err = findBinary("gpuplane-agent", f.agentBinary); err != nil {
			return nil, fmt.Errorf("%w; build it with `make build` or pass --agent-binary", err)
		}
	}
	return spec, nil
}

// resolveOperators checks --operators: known names, each once, built into
// the operators directory.
func resolveOperators(spec *Spec, f *upFlags) error {
	if len(f.operators) == 0 && len(f.karpenterPools) == 0 {
		return nil
	}
	dir := f.operatorsDir
	if dir == "" {
		dir = localcluster.OperatorsDir(spec.BinDir)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return cliutil.Usagef("--operators-dir %q: %w", f.operatorsDir, err)
	}
	seen := map[string]bool{}
	for _, name := range f.operators {
		name = strings.TrimSpace(name)
		if seen[name] {
			return cliutil.Usagef("--operators: %s given twice", name)
		}
		seen[name] = true
		if name == localcluster.OperatorKarpenter {
			return cliutil.Usagef("--operators: Karpenter runs with --karpenter-pools, which give it its GPU node pools")
		}
		if err := localcluster.VerifyOperator(dir, name); err != nil {
			if errors.Is(err, localcluster.ErrUnknownOperator) {
				return cliutil.Usagef("--operators: %w", err)
			}
			return fmt.Errorf("--operators: %w", err)
		}
		spec.Operators = append(spec.Operators, name)
	}
	if len(f.karpenterPools) > 0 {
		if err := localcluster.VerifyOperator(dir, localcluster.OperatorKarpenter); err != nil {
			return fmt.Errorf("--karpenter-pools: %w", err)
		}
	}
	spec.OperatorsDir = dir
	return nil
}

// defaultBinDir returns explicit, else $GPUPLANE_CONTROLPLANE_BIN (through
// the launcher), else the directory of this executable when it holds the
// control-plane binaries (bin/gpuplane beside bin/kube-apiserver), else ""
// for the checkout's bin/.
func defaultBinDir(explicit string) string {
	if explicit != "" || os.Getenv(localcluster.BinDirEnv) != "" {
		return explicit
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(self), localcluster.BinKubeAPIServer)); err == nil {
		return filepath.Dir(self)
	}
	return ""
}

// findBinary returns explicit, else name beside the running executable,
// else name on $PATH.
func findBinary(name, explicit string) (string, error) {
	if explicit != "" {
		abs, err := filepath.Abs(explicit)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return abs, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found beside %s or on $PATH", name, os.Args[0])
	}
	return filepath.Abs(p)
}

// startSupervisor re-executes this binary as `dev serve` in a new session,
// detached from the terminal, and records its pid.
func startSupervisor(dir stateDir) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("locating this executable to start the supervisor: %w", err)
	}
	logFile, err := os.OpenFile(dir.path(supervisorLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("opening the supervisor log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(self, "dev", "serve", "--state-dir", string(dir))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting the supervisor: %w", err)
	}
	pid := cmd.Process.Pid
	if err := dir.writePid(pid); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	// Reap it when it exits while this process still runs (start-up
	// failure); after `up` returns, init adopts it.
	go func() { _ = cmd.Wait() }()
	return pid, nil
}

// follow prints the supervisor's progress lines until it is ready, fails,
// dies or the timeout passes.
func follow(ctx context.Context, dir stateDir, pid int, timeout time.Duration, out io.Writer) (*State, error) {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	printed := 0
	for {
		printed = printProgress(dir, printed, out)
		st, err := dir.readState()
		switch {
		case err == nil && st.Phase == PhaseReady:
			return st, nil
		case err == nil && st.Phase == PhaseFailed:
			return nil, errors.New(st.Error)
		case !processAlive(pid):
			return nil, fmt.Errorf("the supervisor (pid %d) exited during start-up; the end of its log:\n%s", pid, localcluster.TailFile(dir.path(supervisorLog), 10))
		case time.Now().After(deadline):
			return nil, fmt.Errorf("the cluster was not up after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted: %w", ctx.Err())
		case <-ticker.C:
		}
	}
}

// printProgress prints the progress lines after the first skip ones and
// returns how many there are.
func printProgress(dir stateDir, skip int, out io.Writer) int {
	f, err := os.Open(dir.path(progressFile))
	if err != nil {
		return skip
	}
	defer func() { _ = f.Close() }()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n >= skip {
			fmt.Fprintf(out, "  %s\n", sc.Text())
		}
		n++
	}
	return n
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func newServeCommand(resolve func() (stateDir, error)) *cobra.Command {
	return &cobra.Command{
		Use:    "serve",
		Short:  "Run the dev cluster's supervisor in the foreground (started by dev up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			dir, err := resolve()
			if err != nil {
				return err
			}
			return serve(dir)
		},
	}
}

// queueCRDFile is the Queue CRD's file in a CRD directory.
const queueCRDFile = "scheduling.gpuplane.io_queues.yaml"

// writeEmbeddedCRDs writes the CRDs built into the binary to dir and
// returns it.
func writeEmbeddedCRDs(dir string) (string, error) {
	return writeEmbedded(crds.Files, dir, "CRDs")
}

// writeEmbedded writes the files of an embedded manifest set (what names
// it in errors) to dir and returns it.
func writeEmbedded(files embed.FS, dir, what string) (string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("writing the %s: %w", what, err)
	}
	entries, err := files.ReadDir(".")
	if err != nil {
		return "", fmt.Errorf("reading the built-in %s: %w", what, err)
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".yaml" {
			continue
		}
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return "", fmt.Errorf("reading the built-in %s %s: %w", what, e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			return "", fmt.Errorf("writing the %s: %w", what, err)
		}
	}
	return dir, nil
}
