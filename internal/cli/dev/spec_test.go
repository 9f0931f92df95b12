package dev

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

func TestParseNodeProfile(t *testing.T) {
	tests := []struct {
		arg          string
		profile      string
		mode         string
		replicas     int
		wantUsageErr string
	}{
		{arg: "dgxh100", profile: "dgxh100", mode: ModeWhole},
		{arg: "dgxh100:whole", profile: "dgxh100", mode: ModeWhole},
		{arg: "dgxa100:mig-mixed", profile: "dgxa100", mode: ModeMIGMixed},
		{arg: "dgxh100:time-slicing", profile: "dgxh100", mode: ModeTimeSlicing, replicas: 4},
		{arg: "dgxb200:time-slicing=8", profile: "dgxb200", mode: ModeTimeSlicing, replicas: 8},
		{arg: "", wantUsageErr: "want PROFILE[:MODE]"},
		{arg: "dgx9000", wantUsageErr: "dgxh100"},
		{arg: "dgxh100:mps", wantUsageErr: "unknown mode"},
		{arg: "dgxh100:time-slicing=1", wantUsageErr: ">= 2"},
		{arg: "dgxh100:time-slicing=many", wantUsageErr: ">= 2"},
		{arg: "dgxh100:mig-mixed=2", wantUsageErr: "only time-slicing"},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			profile, mode, replicas, err := parseNodeProfile(tt.arg)
			if tt.wantUsageErr != "" {
				var ue *cliutil.UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantUsageErr) {
					t.Fatalf("error %v, want a usage error mentioning %q", err, tt.wantUsageErr)
				}
				return
			}
			if err != nil || profile != tt.profile || mode != tt.mode || replicas != tt.replicas {
				t.Errorf("= %q %q %d %v, want %q %q %d", profile, mode, replicas, err, tt.profile, tt.mode, tt.replicas)
			}
		})
	}
}

func TestPrepareNode(t *testing.T) {
	tests := []struct {
		arg           string
		wantResources []string
		wantConfig    string
		wantErr       string
	}{
		{arg: "dgxh100", wantResources: []string{"nvidia.com/gpu"}},
		{arg: "dgxh100:time-slicing=3", wantResources: []string{"nvidia.com/gpu"}, wantConfig: "replicas: 3"},
		{arg: "dgxh100:mig-mixed", wantResources: []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"}, wantConfig: "migStrategy: mixed"},
		{arg: "dgxa100:mig-mixed", wantResources: []string{"nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"}, wantConfig: "migStrategy: mixed"},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			n, err := prepareNode(t.Context(), "n1", tt.arg, filepath.Join(t.TempDir(), "n1"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(n.Resources, tt.wantResources) {
				t.Errorf("resources %v, want %v", n.Resources, tt.wantResources)
			}
			if tt.wantConfig == "" {
				if n.AgentConfig != "" {
					t.Errorf("agent config %s, want none", n.AgentConfig)
				}
				return
			}
			b, err := os.ReadFile(n.AgentConfig)
			if err != nil || !strings.Contains(string(b), tt.wantConfig) {
				t.Errorf("agent config %q (%v), want it to contain %q", b, err, tt.wantConfig)
			}
		})
	}
}

func TestLabelValue(t *testing.T) {
	tests := map[string]string{
		"dgxh100":                "dgxh100",
		"dgxh100:time-slicing=4": "dgxh100_time-slicing_4",
		"/tmp/my node.yaml":      "tmp_my_node.yaml",
		strings.Repeat("a", 70):  strings.Repeat("a", 63),
	}
	for in, want := range tests {
		t.Run(in[:min(len(in), 20)], func(t *testing.T) {
			if got := labelValue(in); got != want {
				t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
			}
		})
	}
}

func TestStateDir(t *testing.T) {
	dir := stateDir(t.TempDir())
	tests := []struct {
		name    string
		pidFile string
		wantPid int
		wantErr bool
	}{
		{"no pid file", "", 0, false},
		{"a pid", "1234\n", 1234, false},
		{"garbage", "abc", 0, true},
		{"negative", "-5", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = os.Remove(dir.path(pidFile))
			if tt.pidFile != "" {
				if err := os.WriteFile(dir.path(pidFile), []byte(tt.pidFile), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			pid, err := dir.readPid()
			if (err != nil) != tt.wantErr || pid != tt.wantPid {
				t.Errorf("readPid = %d, %v; want %d, error %v", pid, err, tt.wantPid, tt.wantErr)
			}
		})
	}
	t.Run("this test is alive but no supervisor", func(t *testing.T) {
		if !processAlive(os.Getpid()) {
			t.Error("processAlive(self) = false")
		}
		if supervisorAlive(os.Getpid()) {
			t.Error("supervisorAlive(test binary) = true; only `dev serve` counts")
		}
	})
	t.Run("state round trip", func(t *testing.T) {
		want := &State{Phase: PhaseReady, Pid: 7, Pids: map[string]int{"etcd": 8}}
		if err := dir.writeState(want); err != nil {
			t.Fatal(err)
		}
		got, err := dir.readState()
		if err != nil || got.Phase != want.Phase || got.Pids["etcd"] != 8 {
			t.Errorf("readState = %+v, %v", got, err)
		}
	})
}

func TestResolveOperators(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"kuberay", "training-operator"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, f+"-crds"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f+"-crds", "crd.yaml"), []byte("kind: CustomResourceDefinition\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		operators []string
		want      []string
		wantUsage string
		wantErr   string
	}{
		{name: "none", operators: nil},
		{name: "both", operators: []string{"training-operator", " kuberay"}, want: []string{"training-operator", "kuberay"}},
		{name: "unknown", operators: []string{"volcano"}, wantUsage: "unknown workload operator \"volcano\""},
		{name: "twice", operators: []string{"kuberay", "kuberay"}, wantUsage: "kuberay given twice"},
		{name: "not built", operators: []string{"jobset"}, wantErr: "make operator-bins"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &Spec{BinDir: "/nonexistent"}
			err := resolveOperators(spec, &upFlags{operators: tt.operators, operatorsDir: dir})
			var ue *cliutil.UsageError
			switch {
			case tt.wantUsage != "":
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantUsage) {
					t.Fatalf("error %v, want a usage error mentioning %q", err, tt.wantUsage)
				}
			case tt.wantErr != "":
				if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one (not a usage error) mentioning %q", err, tt.wantErr)
				}
			default:
				if err != nil || !slices.Equal(spec.Operators, tt.want) {
					t.Fatalf("operators %v, error %v; want %v", spec.Operators, err, tt.want)
				}
				if len(tt.want) > 0 && spec.OperatorsDir != dir {
					t.Errorf("operators dir %q, want %q", spec.OperatorsDir, dir)
				}
			}
		})
	}
}
