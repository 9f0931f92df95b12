package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/testutil"
)

// flakyServer fails its first calls, then answers.
type flakyServer struct {
	mu    sync.Mutex
	fails int
	calls int
}

func (f *flakyServer) ServerVersion() (*version.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fails {
		return nil, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	}
	return &version.Info{GitVersion: "v1.36.3"}, nil
}

func TestReportReachability(t *testing.T) {
	tests := []struct {
		name      string
		fails     int
		wantFails int
		wantBack  bool
	}{
		{name: "reachable at once says nothing", fails: 0},
		{name: "unreachable is said at once and on every retry, then the recovery", fails: 3, wantFails: 3, wantBack: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf testutil.Buffer
			log := logr.FromSlogHandler(slog.NewTextHandler(&buf, nil))
			srv := &flakyServer{fails: tt.fails}
			reportReachability(t.Context(), srv, "https://127.0.0.1:1", log, make(chan struct{}), time.Millisecond)
			out := buf.String()
			if got := strings.Count(out, "cannot reach the API server"); got != tt.wantFails {
				t.Errorf("%d failure lines, want %d:\n%s", got, tt.wantFails, out)
			}
			if strings.Contains(out, "reached the API server") != tt.wantBack {
				t.Errorf("recovery logged = %v, want %v:\n%s", !tt.wantBack, tt.wantBack, out)
			}
		})
	}
}

// TestRunSaysWhenTheAPIServerIsUnreachable runs the scheduler against a
// closed port: the first log line comes at once, not after the informers'
// retries.
func TestRunSaysWhenTheAPIServerIsUnreachable(t *testing.T) {
	var buf testutil.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buf.String(), "cannot reach the API server") {
		if time.Now().After(deadline) {
			t.Fatalf("nothing said about the unreachable API server within 10s:\n%s", buf.String())
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v before saying anything", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !strings.Contains(buf.String(), "host=https://127.0.0.1:1") {
		t.Errorf("the log does not name the address:\n%s", buf.String())
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("Run returned nil after its caches never synced")
	}
}

// The serving port answers health and metrics, and pprof only when asked.
func TestServe(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		t.Run(fmt.Sprintf("profiling=%v", profiling), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			_ = ln.Close()
			var ready atomic.Bool
			stop, err := serve(addr, profiling, newMetrics(), &ready, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			get := func(path string) int {
				resp, err := http.Get("http://" + addr + path) //nolint:noctx // loopback test server
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				return resp.StatusCode
			}
			if code := get("/readyz"); code != http.StatusServiceUnavailable {
				t.Errorf("/readyz before sync: %d, want 503", code)
			}
			ready.Store(true)
			if code := get("/readyz"); code != http.StatusOK {
				t.Errorf("/readyz after sync: %d, want 200", code)
			}
			want := http.StatusNotFound
			if profiling {
				want = http.StatusOK
			}
			if code := get("/debug/pprof/heap"); code != want {
				t.Errorf("/debug/pprof/heap: %d, want %d", code, want)
			}
		})
	}
}
