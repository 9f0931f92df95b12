package nodesim_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/nodesim"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// node starts a simulated node running the agent with the given profile and
// agent config (empty for none), stopped and deleted when the test ends.
func node(t testing.TB, name, profile, agentConfig string) *nodesim.Simulator {
	t.Helper()
	return startNode(t, name, profile, agentConfig, "")
}

// nodeWithAPI is node with the agent reading the API server (kubeconfig):
// it labels its Node and gives pods the GPUs gpuplane-scheduler chose.
func nodeWithAPI(t testing.TB, name, profile, agentConfig string) *nodesim.Simulator {
	t.Helper()
	return startNode(t, name, profile, agentConfig, env.ControlPlane.Kubeconfig())
}

func startNode(t testing.TB, name, profile, agentConfig, kubeconfig string, agentArgs ...string) *nodesim.Simulator {
	t.Helper()
	dir, err := os.MkdirTemp("", "ns-")
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := ""
	if agentConfig != "" {
		cfgFile = filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(cfgFile, []byte(agentConfig), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(profile, "\n") {
		path := filepath.Join(dir, "profile.yaml")
		if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
			t.Fatal(err)
		}
		profile = path
	}
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	sim, err := nodesim.Start(t.Context(), nodesim.Config{
		NodeName: name, Dir: filepath.Join(dir, "k"), Client: env.Client, DeleteNodeOnStop: true, Logger: log,
		Agent: &nodesim.AgentConfig{Binary: agentBinary, Profile: profile, ConfigFile: cfgFile, Kubeconfig: kubeconfig, ExtraArgs: agentArgs},
	})
	if err != nil {
		t.Fatalf("starting simulated node %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sim.Stop(ctx); err != nil {
			t.Errorf("stopping simulated node %s: %v", name, err)
		}
		// Without a namespace controller the test's pods outlive it: a
		// node of the same name in the next run (-count) would count them.
		zero := int64(0)
		pods, err := env.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			t.Errorf("listing the pods bound to %s: %v", name, err)
		} else {
			for _, p := range pods.Items {
				err := env.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting pod %s/%s: %v", p.Namespace, p.Name, err)
				}
			}
		}
		if t.Failed() {
			t.Logf("agent log of %s:\n%s", name, localcluster.TailFile(filepath.Join(dir, "k", "agent.log"), 40))
		}
		_ = os.RemoveAll(dir)
	})
	return sim
}

// waitCapacity waits until the Node reports want capacity and allocatable
// for each resource, and is Ready.
func waitCapacity(t testing.TB, name string, want map[string]int64) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("node %s Ready with %v", name, want), func(ctx context.Context) (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !framework.NodeReady(n) {
			return false, fmt.Errorf("node not Ready")
		}
		for r, v := range want {
			c, a := n.Status.Capacity[corev1.ResourceName(r)], n.Status.Allocatable[corev1.ResourceName(r)]
			if c.Value() != v || a.Value() != v {
				return false, fmt.Errorf("%s capacity %s allocatable %s, want %d", r, c.String(), a.String(), v)
			}
		}
		return true, nil
	})
}

// allocation waits until the pod is Running and returns its recorded
// allocation.
func allocation(t *testing.T, ns, name string) *gpupod.PodAllocation {
	t.Helper()
	// A pod with a short duration can be Succeeded by the first look: it
	// started, and its allocation stays on it.
	running, succeeded := env.PodPhase(ns, name, corev1.PodRunning), env.PodPhase(ns, name, corev1.PodSucceeded)
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("pod %s/%s started", ns, name), func(ctx context.Context) (bool, error) {
		if done, _ := succeeded(ctx); done {
			return true, nil
		}
		return running(ctx)
	})
	pod, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := gpupod.ReadAllocation(pod)
	if err != nil || a == nil {
		t.Fatalf("pod %s/%s is Running without a readable %s annotation: %v", ns, name, gpupod.AllocationAnnotation, err)
	}
	return a
}

func createPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, err := env.Client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

// listPodResources asks the node's PodResources API which pods hold which
// devices: "namespace/name" -> resource -> device IDs.
func listPodResources(t *testing.T, sim *nodesim.Simulator) map[string]map[string][]string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sim.PodResourcesSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(t.Context(), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("PodResources List: %v", err)
	}
	out := map[string]map[string][]string{}
	for _, p := range resp.GetPodResources() {
		m := map[string][]string{}
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				m[d.GetResourceName()] = append(m[d.GetResourceName()], d.GetDeviceIds()...)
			}
		}
		out[p.GetNamespace()+"/"+p.GetName()] = m
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
