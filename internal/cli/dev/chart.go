package dev

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/api/gpunode"
	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/nodesim"
)

// ChartRelease is the Helm release `dev up --install chart` installs, in
// helmchart.DefaultNamespace.
const ChartRelease = "gpuplane"

// nfdPCILabel is the label node-feature-discovery puts on a node with an
// NVIDIA PCI device; the chart's agent DaemonSet selects nodes by it.
const nfdPCILabel = "feature.node.kubernetes.io/pci-10de.present"

// chartValues are the values `dev up` installs the chart with: one config
// per kind of node in config.map (each node labelled with its own), one
// scheduler replica, every admission policy (gpuAccess in every namespace).
func chartValues(spec *Spec) (map[string]any, error) {
	configs := map[string]any{ModeWhole: "version: v1\nflags:\n  migStrategy: none\n"}
	for _, n := range spec.Nodes {
		if n.AgentConfig == "" {
			continue
		}
		b, err := os.ReadFile(n.AgentConfig)
		if err != nil {
			return nil, fmt.Errorf("reading the agent config of node %s: %w", n.Name, err)
		}
		configs[n.ConfigName] = string(b)
	}
	return map[string]any{
		"config":    map[string]any{"map": configs, "default": ModeWhole},
		"scheduler": map[string]any{"replicas": 1},
		"admission": map[string]any{"kaiPods": true, "hamiPods": true, "gpuAccessScope": "all"},
		// The chart's agent pods run the DRA driver only when dev up runs
		// agents itself (--install processes); see --dra.
		"agent": map[string]any{"dra": map[string]any{"enabled": false}},
	}, nil
}

// installChart installs gpuplane's chart with Helm's Go SDK, as `helm
// install gpuplane deploy/helm/gpuplane -n gpuplane-system
// --create-namespace` would.
func (s *supervisor) installChart(ctx context.Context, cp *localcluster.ControlPlane) error {
	s.step("installing gpuplane's Helm chart (release %s in namespace %s)", ChartRelease, helmchart.DefaultNamespace)
	c, err := helmchart.Load()
	if err != nil {
		return err
	}
	values, err := chartValues(s.spec)
	if err != nil {
		return err
	}
	cfg, err := helmchart.ActionConfig(cp.Kubeconfig(), helmchart.DefaultNamespace, func(format string, v ...any) {
		s.log.Debug(fmt.Sprintf(format, v...), "part", "helm")
	})
	if err != nil {
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace, in.Timeout = ChartRelease, helmchart.DefaultNamespace, true, 2*time.Minute
	if _, err := in.RunWithContext(ctx, c, values); err != nil {
		return fmt.Errorf("helm install of the gpuplane chart: %w", err)
	}
	return nil
}

// chartNode is the simulator configuration of a node whose gpuplane pods
// come from the chart: NFD's PCI label so the agent DaemonSet selects it,
// the label naming its config, and the node's simulated GPUs handed to the
// containers it runs.
func (s *supervisor) chartNode(cfg *nodesim.Config, n NodeSpec, cp *localcluster.ControlPlane) {
	cfg.Labels[nfdPCILabel] = "true"
	cfg.Labels[gpunode.ConfigLabel] = n.ConfigName
	cfg.Containers = &nodesim.ContainerConfig{
		Binaries:  map[string]string{"gpuplane-agent": s.spec.AgentBinary, "gpuplane-scheduler": s.spec.SchedulerBinary},
		Env:       chartEnv(n),
		APIServer: cp.APIServerURL(),
		CAData:    cp.RESTConfig().CAData,
	}
}

// waitChartPods waits until the chart's agent pod on every simulated node
// and its scheduler are Ready (their readiness probes passing), and
// records the agents' metrics addresses.
func (s *supervisor) waitChartPods(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	last := ""
	for {
		agents, sched, err := chartPods(ctx, client)
		if err == nil {
			var missing []string
			for _, n := range s.spec.Nodes {
				if p, ok := agents[n.Name]; !ok || !podReady(p) {
					missing = append(missing, "gpuplane-agent on "+n.Name)
				}
			}
			if sched == 0 {
				missing = append(missing, "gpuplane-scheduler")
			}
			if len(missing) == 0 {
				s.mu.Lock()
				for node, p := range agents {
					s.state.Metrics[node] = "http://" + p.Status.PodIP + ":9400/metrics"
				}
				s.mu.Unlock()
				return s.writeState()
			}
			last = "not Ready: " + strings.Join(missing, ", ")
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the chart's pods: %w (%s)", ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// chartPods returns the chart's agent pods by node and how many scheduler
// pods are Ready.
func chartPods(ctx context.Context, client kubernetes.Interface) (map[string]*corev1.Pod, int, error) {
	pods, err := client.CoreV1().Pods(helmchart.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=gpuplane"})
	if err != nil {
		return nil, 0, err
	}
	agents := map[string]*corev1.Pod{}
	sched := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		switch p.Labels["app.kubernetes.io/name"] {
		case "gpuplane-agent":
			if old, ok := agents[p.Spec.NodeName]; !ok || podReady(p) && !podReady(old) {
				agents[p.Spec.NodeName] = p
			}
		case "gpuplane-scheduler":
			if podReady(p) {
				sched++
			}
		}
	}
	return agents, sched, nil
}

func podReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// chartCrashes returns an error naming a chart pod whose container
// exited during start-up, with its exit and its log, so that a wrong flag
// or a missing permission says so at once instead of as a timeout.
func (s *supervisor) chartCrashes(ctx context.Context, client kubernetes.Interface) error {
	pods, err := client.CoreV1().Pods(helmchart.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=gpuplane"})
	if err != nil {
		return nil
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodFailed {
			return fmt.Errorf("the chart's pod %s on node %s failed: %s: %s", p.Name, p.Spec.NodeName, p.Status.Reason, p.Status.Message)
		}
		for _, c := range p.Status.ContainerStatuses {
			t := c.LastTerminationState.Terminated
			if c.RestartCount == 0 || t == nil {
				continue
			}
			log := ""
			for i, n := range s.spec.Nodes {
				if n.Name == p.Spec.NodeName {
					log = s.dir.path(filepath.Join("n", strconv.Itoa(i), "pods", string(p.UID), c.Name+".log"))
				}
			}
			return fmt.Errorf("the chart's pod %s on node %s: container %s exited (%s, exit code %d) during start-up; its log: %s%s",
				p.Name, p.Spec.NodeName, c.Name, t.Reason, t.ExitCode, log, tail(log, 5))
		}
	}
	return nil
}

// tail returns the last n lines of the file at path, indented, or "".
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "\n    " + strings.Join(lines, "\n    ")
}

// chartEnv is what the node simulator hands the chart's agent pod about
// its simulated GPUs: the profile, and the rack's NVLink fabric.
func chartEnv(n NodeSpec) []string {
	env := []string{gpunode.EnvSimulate + "=" + n.SimProfile}
	if n.Fabric != "" {
		env = append(env, gpunode.EnvSimulateFabric+"="+n.Fabric)
	}
	return env
}
