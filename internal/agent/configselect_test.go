package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfigs(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	// A mounted ConfigMap keeps its versions in hidden entries.
	if err := os.Mkdir(filepath.Join(dir, "..data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("version: v1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestConfigSelectorChooses(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name     string
		configs  []string
		def      string
		fallback string
		label    string
		want     string
		wantErr  string
	}{
		{name: "label wins", configs: []string{"default", "mig-mixed"}, def: "default", fallback: "named,single", label: "mig-mixed", want: "mig-mixed"},
		{name: "label names no config", configs: []string{"default"}, fallback: "named", label: "a100-80gb", wantErr: "nvidia.com/device-plugin.config=a100-80gb names no config"},
		{name: "default without label", configs: []string{"ts", "mig"}, def: "ts", fallback: "named,single", want: "ts"},
		{name: "default missing", configs: []string{"ts"}, def: "mig", fallback: "named,single", wantErr: "--config-default mig: no such config"},
		{name: "named fallback", configs: []string{"default", "other"}, fallback: "named,single", want: "default"},
		{name: "single fallback", configs: []string{"only"}, fallback: "named,single", want: "only"},
		{name: "named before single", configs: []string{"default"}, fallback: "single,named", want: "default"},
		{name: "no fallback applies", configs: []string{"a", "b"}, fallback: "named,single", wantErr: "label the node or set the default"},
		{name: "fallbacks off", configs: []string{"only"}, fallback: "", wantErr: "no config for this node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeConfigs(t, tc.configs...)
			s, err := newConfigSelector(dir, tc.def, tc.fallback, quiet)
			if err != nil {
				t.Fatal(err)
			}
			s.setLabel(tc.label)
			got, err := s.Select()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Select() = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, tc.want); got != want {
				t.Errorf("Select() = %s, want %s", got, want)
			}
		})
	}
}

func TestConfigSelectorRefusesBadFlags(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := newConfigSelector(writeConfigs(t), "", "named,first", quiet); err == nil || !strings.Contains(err.Error(), `"first"`) {
		t.Errorf("unknown fallback: %v", err)
	}
	if _, err := newConfigSelector(filepath.Join(t.TempDir(), "absent"), "", "named", quiet); err == nil || !strings.Contains(err.Error(), "--config-dir") {
		t.Errorf("missing directory: %v", err)
	}
}

// TestConfigSelectorAsksForReload: a new label or a changed file asks for
// one reload; a choice that fails keeps the last config (no reload).
func TestConfigSelectorAsksForReload(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := writeConfigs(t, "default", "mig")
	s, err := newConfigSelector(dir, "", "named", quiet)
	if err != nil {
		t.Fatal(err)
	}
	reload := make(chan struct{}, 1)
	asked := func() bool {
		select {
		case <-reload:
			return true
		default:
			return false
		}
	}
	s.check(reload)
	if asked() {
		t.Fatal("the first check asked for a reload")
	}
	s.check(reload)
	if asked() {
		t.Fatal("an unchanged config asked for a reload")
	}
	s.setLabel("mig")
	s.check(reload)
	if !asked() {
		t.Fatal("a new label asked for no reload")
	}
	if err := os.WriteFile(filepath.Join(dir, "mig"), []byte("version: v1\nflags:\n  migStrategy: mixed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.check(reload)
	if !asked() {
		t.Fatal("a changed file asked for no reload")
	}
	s.setLabel("absent")
	s.check(reload)
	if asked() {
		t.Fatal("a label naming no config asked for a reload")
	}
}
