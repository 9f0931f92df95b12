package agent

import (
	"sync/atomic"

	"github.com/gpuplane/gpuplane/internal/sharing"
)

// servedResources holds the one snapshot of the resources the device
// plugin serves. Only the device-plugin part stores it (first of the
// config followers, at start and after every reload that took effect,
// before the kubelet is sent the resources); the pod recorder, the
// quarantine, the metrics' share book, the DRA driver and the MIG part
// read it. Until the plugin first serves, it holds nil, which serves
// nothing.
type servedResources struct {
	p atomic.Pointer[sharing.Served]
}

func (s *servedResources) load() *sharing.Served { return s.p.Load() }

func (s *servedResources) store(rs []*sharing.Resource) { s.p.Store(sharing.NewServed(rs)) }

// uuid maps a device-plugin device ID to its GPU or MIG UUID
// (dra.ServeOptions.DeviceUUID).
func (s *servedResources) uuid(resource, id string) (string, bool) {
	d, ok := s.load().Device(resource, id)
	if !ok {
		return "", false
	}
	return d.UUID, true
}
