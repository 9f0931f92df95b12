// Package cli_test runs the gpuplane CLI in-process against a real etcd,
// kube-apiserver (RBAC on) and kube-controller-manager: kubectl's cluster
// flags (--context, -n, --as), the exit codes of an answer the server gave
// (403: 1) and of one it refused to give (401: 3), and -o over real
// objects.
package cli_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/cli"
	"github.com/gpuplane/gpuplane/internal/cli/status"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, localcluster.Config{ControllerManager: true}, &env))
}

// gpuplane runs the CLI as main does.
func gpuplane(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(args, &out, &errb)
	return out.String(), errb.String(), code
}

// kubeconfigs writes variants of the admin kubeconfig: contexts, whose
// current one is a dead loopback port and "live" the cluster; and
// badToken, the cluster with credentials it refuses.
func kubeconfigs(t *testing.T) (contexts, badToken string) {
	t.Helper()
	admin, err := clientcmd.LoadFromFile(env.ControlPlane.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	live := admin.Contexts[admin.CurrentContext]
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	c := admin.DeepCopy()
	c.Clusters["dead"] = &clientcmdapi.Cluster{Server: dead, InsecureSkipTLSVerify: true}
	c.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: live.AuthInfo}
	c.Contexts["live"] = live.DeepCopy()
	c.CurrentContext = "dead"
	contexts = filepath.Join(dir, "contexts")
	if err := clientcmd.WriteToFile(*c, contexts); err != nil {
		t.Fatal(err)
	}

	b := admin.DeepCopy()
	b.AuthInfos[live.AuthInfo] = &clientcmdapi.AuthInfo{Token: "not-a-token-the-server-knows"}
	badToken = filepath.Join(dir, "bad-token")
	if err := clientcmd.WriteToFile(*b, badToken); err != nil {
		t.Fatal(err)
	}
	return contexts, badToken
}

func TestClusterFlagsAndExitCodes(t *testing.T) {
	ctx := t.Context()
	contexts, badToken := kubeconfigs(t)
	admin := env.ControlPlane.Kubeconfig()
	stranger, err := env.ControlPlane.UserKubeconfig("cli-stranger")
	if err != nil {
		t.Fatal(err)
	}
	// Isolate from the machine's own kubeconfig.
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())

	node := framework.UnmanagedGPUNode("cli-gpu-1").Obj()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(t.Context(), node.Name, metav1.DeleteOptions{}) })
	nsA, nsB := env.CreateNamespace(t), env.CreateNamespace(t)
	for _, p := range []*corev1.Pod{
		framework.Pod(nsA, "holder").GPUs(2).NodeName(node.Name).Annotation("gpuplane.io/gpus-held", "0,1").Obj(),
		framework.Pod(nsA, "waiting-a").GPUs(1).SchedulerName(v1alpha1.SchedulerName).Obj(),
		framework.Pod(nsB, "waiting-b").GPUs(1).SchedulerName(v1alpha1.SchedulerName).Obj(),
	} {
		if _, err := env.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	decode := func(t *testing.T, out string) *status.Status {
		t.Helper()
		var st status.Status
		if err := yaml.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("decoding %q: %v", out, err)
		}
		return &st
	}
	waiting := func(st *status.Status) []string {
		var out []string
		for _, g := range st.Waiting {
			out = append(out, g.Namespace+"/"+g.Name)
		}
		return out
	}

	t.Run("the current context is dead: 3; --context live reads the cluster", func(t *testing.T) {
		if _, stderr, code := gpuplane(t, "status", "--kubeconfig", contexts); code != cliutil.ExitUnreachable {
			t.Fatalf("exit %d, stderr %q; want %d", code, stderr, cliutil.ExitUnreachable)
		}
		out, stderr, code := gpuplane(t, "status", "--kubeconfig", contexts, "--context", "live", "-o", "yaml")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		st := decode(t, out)
		if w := strings.Join(waiting(st), " "); !strings.Contains(w, nsA+"/waiting-a") || !strings.Contains(w, nsB+"/waiting-b") {
			t.Fatalf("waiting %s, want both namespaces' pods", w)
		}
	})
	t.Run("KUBECONFIG and -n: one namespace's waiting pods and holders", func(t *testing.T) {
		t.Setenv("KUBECONFIG", admin)
		out, stderr, code := gpuplane(t, "status", "-n", nsB, "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		st := decode(t, out)
		if w := strings.Join(waiting(st), " "); w != nsB+"/waiting-b" {
			t.Fatalf("waiting %q, want only %s/waiting-b", w, nsB)
		}
		for _, n := range st.Nodes {
			if n.Name == node.Name && (n.Used != 2 || len(n.Holders) != 0) {
				t.Fatalf("node %+v: want 2 GPUs used and no holder of %s listed", n, nsA)
			}
		}
		out, _, code = gpuplane(t, "status", "-n", nsA, "-o", "wide")
		if code != 0 || !strings.Contains(out, "GPU HOLDERS") || !strings.Contains(out, nsA+"/holder") || !strings.Contains(out, "GPU 0,1") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("doctor takes the pod's namespace from -n", func(t *testing.T) {
		out, stderr, code := gpuplane(t, "doctor", "waiting-b", "-n", nsB, "--kubeconfig", admin, "-o", "json")
		var rep struct{ Kind, Name string }
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Kind != "Pod" || rep.Name != nsB+"/waiting-b" {
			t.Fatalf("exit %d, %v, stdout %q stderr %q", code, err, out, stderr)
		}
	})
	t.Run("doctor takes NAMESPACE/NAME", func(t *testing.T) {
		out, stderr, code := gpuplane(t, "doctor", "pod", nsA+"/waiting-a", "--kubeconfig", admin, "-o", "yaml")
		var rep struct{ Kind, Name string }
		if err := yaml.Unmarshal([]byte(out), &rep); err != nil || rep.Kind != "Pod" || rep.Name != nsA+"/waiting-a" {
			t.Fatalf("exit %d, %v, stdout %q stderr %q", code, err, out, stderr)
		}
	})
	t.Run("--as a user without RBAC: the server answers 403, exit 1", func(t *testing.T) {
		_, stderr, code := gpuplane(t, "doctor", "node", node.Name, "--kubeconfig", admin, "--as", "cli-nobody")
		if code != cliutil.ExitFailed || !strings.Contains(stderr, "forbidden") || !strings.Contains(stderr, "cli-nobody") {
			t.Fatalf("exit %d, stderr %q; want 1 and the server's refusal", code, stderr)
		}
	})
	t.Run("a user without RBAC: 403, exit 1", func(t *testing.T) {
		_, stderr, code := gpuplane(t, "mig", "plan", node.Name, "all-1g.10gb", "--kubeconfig", stranger)
		if code != cliutil.ExitFailed || !strings.Contains(stderr, "forbidden") {
			t.Fatalf("exit %d, stderr %q; want 1 and forbidden", code, stderr)
		}
	})
	t.Run("credentials the server refuses: 401, exit 3", func(t *testing.T) {
		_, stderr, code := gpuplane(t, "status", "--kubeconfig", badToken)
		if code != cliutil.ExitUnreachable || !strings.Contains(stderr, "Unauthorized") {
			t.Fatalf("exit %d, stderr %q; want 3 and Unauthorized", code, stderr)
		}
	})
	t.Run("what was asked fails: 1", func(t *testing.T) {
		_, stderr, code := gpuplane(t, "mig", "plan", node.Name, "all-1g.10gb", "--kubeconfig", admin)
		if code != cliutil.ExitFailed || !strings.Contains(stderr, "has no gpuplane.io/mig-layout annotation") {
			t.Fatalf("exit %d, stderr %q; want 1 naming the missing annotation", code, stderr)
		}
	})
	t.Run("topology convert reads the cluster of --kubeconfig", func(t *testing.T) {
		_, stderr, code := gpuplane(t, "topology", "convert", "--kubeconfig", admin, "-o", "table")
		if code != cliutil.ExitFailed || !strings.Contains(stderr, "serves neither Kueue's nor KAI's Topology") {
			t.Fatalf("exit %d, stderr %q; want 1: no Topology CRDs here", code, stderr)
		}
	})
}
