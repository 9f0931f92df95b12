package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// CompatMinorsEnv names the environment variable listing the Kubernetes
// minors the compatibility tier runs on, space-separated, as `make
// test-compat` sets it from COMPAT_KUBE_MINORS.
const CompatMinorsEnv = "GPUPLANE_COMPAT_MINORS"

// DefaultCompatMinors are the oldest and the newest Kubernetes minors
// gpuplane supports.
var DefaultCompatMinors = []string{"1.34", "1.37"}

// CompatMinors returns the minors of $GPUPLANE_COMPAT_MINORS, else
// DefaultCompatMinors.
func CompatMinors() []string {
	if v := strings.Fields(os.Getenv(CompatMinorsEnv)); len(v) > 0 {
		return v
	}
	return DefaultCompatMinors
}

// KubeVersionConfig returns cfg set to run the Kubernetes components of
// minor (such as "1.34") from bin/k8s-<minor> beside cfg's binaries, which
// `make compat-bins-<minor>` builds; etcd and kwok stay cfg's. Only
// kube-apiserver is built for each minor: leave kube-controller-manager
// and kube-scheduler off (CreateNamespace does the one thing the tests
// need of the controller-manager).
func KubeVersionConfig(cfg localcluster.Config, minor string) (localcluster.Config, error) {
	if minor == "" || strings.ContainsAny(minor, "/ ") {
		return cfg, fmt.Errorf("kubernetes minor %q: want a version such as 1.34", minor)
	}
	dir, err := localcluster.ResolveBinDir(cfg.BinDir)
	if err != nil {
		return cfg, err
	}
	cfg.KubeBinDir = filepath.Join(dir, "k8s-"+minor)
	return cfg, nil
}

// StartEnv starts a control plane of the test's own with cfg
// (StartControlPlane: stopped when the test ends, skipped without its
// binaries unless GPUPLANE_INTEGRATION=1) and wraps it with admin
// clients.
func StartEnv(t *testing.T, cfg localcluster.Config) *Env {
	t.Helper()
	cp := StartControlPlane(t, cfg)
	e, err := NewEnv(cp)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// UntaintReadyNodes does for a control plane without
// kube-controller-manager what its node lifecycle controller does: it
// removes the node.kubernetes.io/not-ready taint, which the API server
// puts on every new node, from the nodes of selector once they are Ready.
// With a controller-manager running it only waits for that.
func (e *Env) UntaintReadyNodes(t TB, selector string, timeout time.Duration) {
	t.Helper()
	if _, kcm := e.ControlPlane.Pids()[localcluster.BinControllerManager]; !kcm {
		Eventually(t, timeout, "Ready nodes "+selector+" untainted", func(ctx context.Context) (bool, error) {
			list, err := e.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return false, err
			}
			for i := range list.Items {
				n := &list.Items[i]
				if !NodeReady(n) {
					return false, fmt.Errorf("node %s is not Ready", n.Name)
				}
				kept := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(tn corev1.Taint) bool { return tn.Key == corev1.TaintNodeNotReady })
				if len(kept) == len(n.Spec.Taints) {
					continue
				}
				n.Spec.Taints = kept
				if _, err := e.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					return false, err
				}
			}
			return true, nil
		})
	}
	e.WaitNodesUntainted(t, selector, timeout)
}
