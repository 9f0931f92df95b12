package framework

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// FreeLoopbackAddr returns a loopback address with a port free at the
// time of the call, for an agent's --simulate-control-addr.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// SimFault posts one of the simulated GPUs' fault controls (path, with
// its query) to the agent serving them on control, retrying until the
// agent answers; a control that answers with an error fails the test.
func SimFault(t testing.TB, control, path string) {
	t.Helper()
	Eventually(t, 30*time.Second, "the agent's fault controls answer "+path, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+control+path, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
		}
		return true, nil
	})
}
