package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

func TestSimControlPart(t *testing.T) {
	p, err := sim.Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name    string
		backend gpu.Backend
		addr    string
		err     string
	}{
		{"not simulated", &gpu.Null{}, "127.0.0.1:0", "--simulate-control-addr: only with --simulate"},
		{"all interfaces", b, ":0", "is not a loopback address"},
		{"another host", b, "10.0.0.1:9999", "is not a loopback address"},
		{"not host:port", b, "127.0.0.1", "is not host:port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := simControlPart(tc.backend, tc.addr, log)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("simControlPart = %v, want %q", err, tc.err)
			}
		})
	}
	t.Run("loopback", func(t *testing.T) {
		part, err := simControlPart(b, "127.0.0.1:0", log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- part.run(ctx) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("the control part ended with %v", err)
		}
	})
}
