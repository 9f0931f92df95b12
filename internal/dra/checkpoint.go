package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// checkpointVersion is the format of the state file.
const checkpointVersion = "gpu.gpuplane.io/checkpoint/v1"

// maxCheckpointBytes bounds the state file read at start: a node prepares
// at most a few hundred claims.
const maxCheckpointBytes = 8 << 20

// Claim states in the checkpoint.
const (
	// statePreparing is written before any side effect of a prepare: a
	// claim found in it at start is rolled back.
	statePreparing = "Preparing"
	// statePrepared is written once everything is in place.
	statePrepared = "Prepared"
)

// checkpoint is what the driver did for which claim.
type checkpoint struct {
	Version string                    `json:"version"`
	Claims  map[string]*preparedClaim `json:"claims"`
}

// preparedClaim is one claim's preparation.
type preparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	State     string           `json:"state"`
	Devices   []preparedDevice `json:"devices"`
	// CDISpec is the claim's CDI spec file.
	CDISpec string `json:"cdiSpec,omitempty"`
	// Sharing is what the claim's sharing config set up (sharing.go).
	Sharing *preparedSharing `json:"sharing,omitempty"`
}

// preparedDevice is one allocated device of a claim.
type preparedDevice struct {
	Requests []string `json:"requests"`
	Pool     string   `json:"pool"`
	Device   string   `json:"device"`
	// UUID is the GPU's or MIG device's, once known.
	UUID   string   `json:"uuid,omitempty"`
	CDIIDs []string `json:"cdiDeviceIDs,omitempty"`
	// MIG is set for a MIG device.
	MIG *preparedMIG `json:"mig,omitempty"`
	// Share is set when the claim has part of a GPU by consumable
	// capacity (capacity.go).
	Share *preparedShare `json:"share,omitempty"`
}

// preparedMIG is a MIG instance a claim uses: created for it (Created),
// or one of the GPU's static layout.
type preparedMIG struct {
	GPUIndex          int    `json:"gpuIndex"`
	Profile           string `json:"profile"`
	PlacementStart    int    `json:"placementStart"`
	PlacementSize     int    `json:"placementSize"`
	Created           bool   `json:"created"`
	GPUInstanceID     int    `json:"gpuInstanceID"`
	ComputeInstanceID int    `json:"computeInstanceID"`
}

// decodeCheckpoint reads a state file strictly and checks what it says.
func decodeCheckpoint(r io.Reader) (*checkpoint, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxCheckpointBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	if len(data) > maxCheckpointBytes {
		return nil, fmt.Errorf("the checkpoint is larger than %d bytes", maxCheckpointBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c checkpoint
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decoding the checkpoint: %w", err)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint version %q: want %s", c.Version, checkpointVersion)
	}
	if c.Claims == nil {
		c.Claims = map[string]*preparedClaim{}
	}
	for uid, pc := range c.Claims {
		if uid == "" || pc == nil {
			return nil, fmt.Errorf("checkpoint: claim %q: empty entry", uid)
		}
		if pc.State != statePreparing && pc.State != statePrepared {
			return nil, fmt.Errorf("checkpoint: claim %s: state %q: want %s or %s", uid, pc.State, statePreparing, statePrepared)
		}
		if err := pc.Sharing.check(len(pc.Devices)); err != nil {
			return nil, fmt.Errorf("checkpoint: claim %s: %w", uid, err)
		}
		if len(pc.Devices) > 64 {
			return nil, fmt.Errorf("checkpoint: claim %s: %d devices, more than a node has", uid, len(pc.Devices))
		}
		for i, d := range pc.Devices {
			if d.Device == "" {
				return nil, fmt.Errorf("checkpoint: claim %s: devices[%d]: no device name", uid, i)
			}
			if err := d.Share.check(); err != nil {
				return nil, fmt.Errorf("checkpoint: claim %s: devices[%d]: %w", uid, i, err)
			}
			if m := d.MIG; m != nil && (m.GPUIndex < 0 || m.PlacementStart < 0 || m.PlacementSize <= 0 || m.PlacementStart+m.PlacementSize > 16) {
				return nil, fmt.Errorf("checkpoint: claim %s: devices[%d]: MIG placement %d:%d on GPU %d is impossible", uid, i, m.PlacementStart, m.PlacementSize, m.GPUIndex)
			}
		}
	}
	return &c, nil
}

// loadCheckpoint reads the state file; a missing file is an empty state.
func loadCheckpoint(path string) (*checkpoint, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return &checkpoint{Version: checkpointVersion, Claims: map[string]*preparedClaim{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the DRA checkpoint: %w", err)
	}
	defer func() { _ = f.Close() }()
	c, err := decodeCheckpoint(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (move it away to start with no prepared claims; their CDI specs and MIG instances are then not cleaned up)", path, err)
	}
	return c, nil
}

// PreparedClaims counts the claims a driver's checkpoint holds, prepared
// or half-prepared (to be rolled back at its next start); 0 when there is
// no checkpoint.
func PreparedClaims(path string) (int, error) {
	c, err := loadCheckpoint(path)
	if err != nil {
		return 0, err
	}
	return len(c.Claims), nil
}

// save replaces the state file atomically: a crash leaves the old or the
// new file, never a mix.
func (c *checkpoint) save(path string) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding the DRA checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".checkpoint-*.json")
	if err != nil {
		return fmt.Errorf("writing the DRA checkpoint: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the DRA checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("syncing the DRA checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing the DRA checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing the DRA checkpoint %s: %w", path, err)
	}
	return nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
