package agent

import (
	"reflect"
	"strings"
	"testing"
	"time"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/labels"
)

func loadConfig(t *testing.T, text string) *configv1.Config {
	t.Helper()
	cfg, err := configv1.Load(strings.NewReader(text), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestLabelsConfigFromPluginConfig checks how the device plugin's config
// becomes what the labels describe.
func TestLabelsConfigFromPluginConfig(t *testing.T) {
	tests := []struct {
		name string
		file string
		want labels.Config
	}{
		{"defaults", "version: v1\n", labels.Config{MIGStrategy: "none", Sharing: map[string]labels.Sharing{}}},
		{
			"time-slicing, renamed by default",
			"version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
			labels.Config{MIGStrategy: "none", Sharing: map[string]labels.Sharing{"nvidia.com/gpu": {Strategy: labels.SharingTimeSlicing, Replicas: 4, Renamed: true}}},
		},
		{
			"mps",
			"version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
			labels.Config{MIGStrategy: "none", Sharing: map[string]labels.Sharing{"nvidia.com/gpu": {Strategy: labels.SharingMPS, Replicas: 2}}},
		},
		{
			"mixed MIG, timestamp and machine type file",
			"version: v1\nflags:\n  migStrategy: mixed\n  gfd:\n    noTimestamp: false\n    machineTypeFile: /host/product_name\n",
			labels.Config{MIGStrategy: "mixed", Sharing: map[string]labels.Sharing{}, Timestamp: true, MachineTypeFile: "/host/product_name"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := labelsConfig(loadConfig(t, tc.file))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("the labels reject the mapped config: %v", err)
			}
		})
	}
}

// TestLabelsInterval checks the precedence: flag, then the config's GPU
// Feature Discovery settings, then the default.
func TestLabelsInterval(t *testing.T) {
	ten := 10 * time.Second
	zero := time.Duration(0)
	tests := []struct {
		name string
		flag *time.Duration
		file string
		want time.Duration
	}{
		{"default", nil, "version: v1\n", time.Minute},
		{"config sleep interval", nil, "version: v1\nflags:\n  gfd:\n    sleepInterval: 30s\n", 30 * time.Second},
		{"config oneshot", nil, "version: v1\nflags:\n  gfd:\n    oneshot: true\n    sleepInterval: 30s\n", 0},
		{"flag over config", &ten, "version: v1\nflags:\n  gfd:\n    oneshot: true\n", 10 * time.Second},
		{"flag zero means once", &zero, "version: v1\nflags:\n  gfd:\n    sleepInterval: 30s\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := labelsInterval(tc.flag, loadConfig(t, tc.file), time.Minute); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
