package agent_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// lateProxy forwards TCP connections from addr to the API server once
// started; before that nothing listens on addr.
type lateProxy struct {
	addr, target string
	ln           net.Listener
	wg           sync.WaitGroup
}

// reserveAddr returns a loopback address nothing listens on.
func reserveAddr(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func (p *lateProxy) start(t *testing.T) {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", p.addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", p.addr, err)
	}
	p.ln = ln
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
}

func (p *lateProxy) forward(c net.Conn) {
	defer func() { _ = c.Close() }()
	up, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// TestAgentWaitsForTheAPIServer starts the agent while its API server
// address refuses connections: the agent must keep running (and serving
// metrics), retry with backoff, and label its Node once the API server
// answers.
func TestAgentWaitsForTheAPIServer(t *testing.T) {
	ctx := t.Context()
	const node = "agent-late-apiserver"
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, framework.UnmanagedGPUNode(node).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })

	kc, err := clientcmd.LoadFromFile(env.ControlPlane.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	proxy := &lateProxy{addr: reserveAddr(t)}
	for _, c := range kc.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		proxy.target = u.Host
		u.Host = proxy.addr
		c.Server = u.String()
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := startAgentProcess(t, "--simulate", "dgxh100", "--node-name", node, "--kubeconfig", kubeconfig,
		"--kubelet-dir", filepath.Join(dir, "kubelet"), "--cdi-dir", "", "--metrics-addr", "127.0.0.1:0", "--labels-interval", "0")

	framework.Eventually(t, 60*time.Second, "two failed labelling attempts", func(context.Context) (bool, error) {
		return strings.Count(p.out.String(), "labelling failed, retrying") >= 2, nil
	})
	select {
	case err := <-p.done:
		t.Fatalf("the agent exited while the API server was unreachable: %v", err)
	default:
	}
	if !servingMetrics.MatchString(p.out.String()) {
		t.Error("the agent does not serve metrics while the API server is unreachable")
	}
	proxy.start(t)
	framework.Eventually(t, 90*time.Second, "labels on "+node+" once the API server answers", func(ctx context.Context) (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if n.Labels["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" {
			return false, errors.New("no gpu.product label yet")
		}
		return true, nil
	})
	if err := p.stop(); err != nil {
		t.Errorf("agent exit after SIGTERM: %v, want exit 0", err)
	}
}
