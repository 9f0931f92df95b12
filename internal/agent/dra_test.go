package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/ledger"
)

func TestLedgerHealth(t *testing.T) {
	l := ledger.New()
	h := newLedgerHealth(deviceplugin.AllHealthy{}, l)
	changes, stop := h.Changes()
	defer stop()

	if !h.Healthy("GPU-a") {
		t.Fatal("a free GPU is withdrawn")
	}
	if err := l.HoldForClaim("claim-1", []string{"GPU-a"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Fatal("a claim's hold did not reach the plugin's ListAndWatch")
	}
	if h.Healthy("GPU-a") {
		t.Error("a claimed GPU is still offered to the kubelet")
	}
	if err := h.Allocated([]string{"GPU-a"}); !errors.Is(err, ledger.ErrHeld) {
		t.Errorf("Allocated(claimed GPU) = %v, want ErrHeld", err)
	}
	if err := h.Allocated([]string{"GPU-b"}); err != nil {
		t.Errorf("Allocated(free GPU) = %v", err)
	}
	if !l.PluginHeld("GPU-b") {
		t.Error("the plugin's Allocate is not in the ledger")
	}
	l.ReleaseClaim("claim-1")
	if !h.Healthy("GPU-a") {
		t.Error("a released GPU is not offered again")
	}
}

func TestServedUUID(t *testing.T) {
	var p servedResources
	if _, ok := p.uuid("nvidia.com/gpu", "GPU-a"); ok {
		t.Error("a device is known before the plugin served any")
	}
	b := simNode(t, "dgxh100")
	st, err := loadState(PluginOptions{}, mustDevices(t, b), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.store(st.resources)
	d := st.resources[0].Devices[3]
	if u, ok := p.uuid(st.resources[0].Name, d.ID); !ok || u != d.UUID {
		t.Errorf("uuid(%s) = %q, %v; want %s", d.ID, u, ok, d.UUID)
	}
}

func mustDevices(t *testing.T, b interface {
	Devices(context.Context) ([]gpu.Device, error)
}) []gpu.Device {
	t.Helper()
	ds, err := b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
