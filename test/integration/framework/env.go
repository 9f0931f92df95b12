package framework

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// CreateNamespace creates a namespace for the test, waits until the
// controller-manager has given it its default ServiceAccount (the API server
// refuses pods before that), or creates that itself on a control plane
// without one, and deletes it when the test ends.
func (e *Env) CreateNamespace(t testing.TB) string {
	t.Helper()
	base := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-", ".", "-").Replace(t.Name()))
	if len(base) > 40 {
		base = base[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(base, "-") + "-"}}
	ns, err := e.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace for %s: %v", t.Name(), err)
	}
	t.Cleanup(func() {
		// Namespace deletion finishes in the background; the test is done.
		if err := e.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	if _, kcm := e.ControlPlane.Pids()[localcluster.BinControllerManager]; !kcm {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "default"}}
		if _, err := e.Client.CoreV1().ServiceAccounts(ns.Name).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the default ServiceAccount of %s: %v", ns.Name, err)
		}
	}
	e.WaitServiceAccount(t, ns.Name, "default", 30*time.Second)
	return ns.Name
}

// WaitServiceAccount waits until the ServiceAccount exists.
func (e *Env) WaitServiceAccount(t TB, namespace, name string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("ServiceAccount %s/%s", namespace, name), func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil, err
	})
}

// CreateNodes creates the nodes with up to parallel requests in flight and
// returns the first error (all are attempted).
func (e *Env) CreateNodes(ctx context.Context, nodes []*corev1.Node, parallel int) error {
	if parallel < 1 {
		parallel = 1
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, parallel)
	)
	for _, n := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := e.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("creating node %s: %w", n.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d nodes failed: %w", len(errs), len(nodes), errors.Join(errs[:min(len(errs), 3)]...))
	}
	return nil
}

// DeleteNodes deletes every node matching the label selector.
func (e *Env) DeleteNodes(ctx context.Context, selector string) error {
	err := e.Client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("deleting nodes %q: %w", selector, err)
	}
	return nil
}

// SchedulerSays is what the scheduler last said of a pod it has not
// bound, from its PodScheduled condition, for a timeout to show: "" when
// the condition is True or absent.
func SchedulerSays(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("PodScheduled %s %s: %q", c.Status, c.Reason, c.Message)
		}
	}
	return ""
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodesReady is a Condition: want nodes match selector and all are Ready.
func (e *Env) NodesReady(selector string, want int) Condition {
	return func(ctx context.Context) (bool, error) {
		list, err := e.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if NodeReady(&list.Items[i]) {
				ready++
			}
		}
		if ready == want && len(list.Items) == want {
			return true, nil
		}
		return false, fmt.Errorf("%d nodes match %q, %d Ready, want %d", len(list.Items), selector, ready, want)
	}
}

// WaitNodesReady waits until want nodes match selector and all are Ready.
func (e *Env) WaitNodesReady(t TB, selector string, want int, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("%d Ready nodes matching %q", want, selector), e.NodesReady(selector, want))
}

// WaitNodesUntainted waits until the nodes matching selector carry none of
// the node.kubernetes.io/ taints the controller-manager puts on new nodes
// until it has seen them Ready: pods that do not tolerate them would wait.
func (e *Env) WaitNodesUntainted(t TB, selector string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, "nodes without not-ready taints", func(ctx context.Context) (bool, error) {
		list, err := e.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for _, n := range list.Items {
			for _, tn := range n.Spec.Taints {
				if strings.HasPrefix(tn.Key, "node.kubernetes.io/") {
					return false, fmt.Errorf("node %s has taint %s", n.Name, tn.Key)
				}
			}
		}
		return true, nil
	})
}

// PodPhase is a Condition: the pod is in phase.
func (e *Env) PodPhase(namespace, name string, phase corev1.PodPhase) Condition {
	return func(ctx context.Context) (bool, error) {
		p, err := e.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == phase {
			return true, nil
		}
		if p.Status.Reason != "" || p.Status.Message != "" {
			return false, fmt.Errorf("pod is %q: %s: %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return false, fmt.Errorf("pod is %q", p.Status.Phase)
	}
}

// WaitPodPhase waits until the pod is in phase.
func (e *Env) WaitPodPhase(t TB, namespace, name string, phase corev1.PodPhase, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("pod %s/%s %s", namespace, name, phase), e.PodPhase(namespace, name, phase))
}

// Kubectl runs the control plane's kubectl with the admin kubeconfig and
// returns its combined output. It does not take a test's context, so that
// cleanups can call it; it gives up after two minutes.
func (e *Env) Kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"--kubeconfig", e.ControlPlane.Kubeconfig()}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(e.ControlPlane.BinDir(), localcluster.BinKubectl), args...).CombinedOutput()
	return string(out), err
}
