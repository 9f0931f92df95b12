package dra

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// Fields an API server drops for a feature gate that is off are said once
// per set of features, naming them, not at every retry of the publisher.
func TestHandleErrorSaysDroppedFieldsOnce(t *testing.T) {
	var out bytes.Buffer
	d := &Driver{log: slog.New(slog.NewTextHandler(&out, nil))}
	partitioned := &resourceslice.DroppedFieldsError{PoolName: "node-0",
		DesiredSlice: &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0"}}}},
		ActualSlice:  &resourceapi.ResourceSlice{}}
	shared := &resourceslice.DroppedFieldsError{PoolName: "node-0",
		DesiredSlice: &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true)}}}},
		ActualSlice:  &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "gpu-0"}}}}}
	for range 3 {
		d.HandleError(context.Background(), partitioned, "publishing")
	}
	d.HandleError(context.Background(), shared, "publishing")
	d.HandleError(context.Background(), errors.New("connection refused"), "publishing")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3 (each set of dropped features once, and the other error):\n%s", len(lines), out.String())
	}
	for i, want := range []string{"DRAPartitionableDevices", "DRAConsumableCapacity", "connection refused"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q does not name %s", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], "level=WARN") {
		t.Errorf("dropped fields logged as %q, want a warning", lines[0])
	}
}
