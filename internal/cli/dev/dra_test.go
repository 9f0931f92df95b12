package dev

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

func TestInstallDeviceClasses(t *testing.T) {
	cfg, err := configv1.Load(strings.NewReader(""), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := dra.DeviceClasses(cfg, dra.CommonMIGProfiles)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// react, when set, answers the creates.
		react   k8stesting.ReactionFunc
		wantErr string
	}{
		{name: "every class of the default config is created"},
		{
			name: "classes that exist are left alone",
			react: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, "x")
			},
		},
		{
			name: "a refused create names the class",
			react: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, "x", errors.New("no"))
			},
			wantErr: "creating DeviceClass " + want[0].Name,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tt.react != nil {
				client.PrependReactor("create", "deviceclasses", tt.react)
			}
			s := &supervisor{log: slog.New(slog.DiscardHandler)}
			err := s.installDeviceClasses(context.Background(), client)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.react != nil {
				return
			}
			got, err := client.ResourceV1().DeviceClasses().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Items) != len(want) {
				t.Fatalf("%d DeviceClasses, want %d", len(got.Items), len(want))
			}
			byName := map[string]resourceapi.DeviceClass{}
			for _, c := range got.Items {
				byName[c.Name] = c
			}
			for _, w := range want {
				if _, ok := byName[w.Name]; !ok {
					t.Errorf("DeviceClass %s missing", w.Name)
				}
			}
			if _, ok := byName[dra.ClassGPU]; !ok {
				t.Errorf("no DeviceClass %s for whole GPUs", dra.ClassGPU)
			}
			// A second run, as on a restart of the supervisor, finds
			// them all.
			if err := s.installDeviceClasses(context.Background(), client); err != nil {
				t.Errorf("installing again: %v", err)
			}
		})
	}
}

// TestWriteMIGDynamicProfile runs over every built-in profile: one with at
// least three MIG-capable GPUs becomes a profile with GPUs 0 and 1 in MIG
// mode and no MIG devices, the rest as they were; any other is refused as
// a usage error.
func TestWriteMIGDynamicProfile(t *testing.T) {
	var written, refused int
	for _, name := range sim.BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			p, err := sim.Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "profile.yaml")
			got, err := writeMIGDynamicProfile(name, path)
			if len(p.GPUs) < 3 || p.GPUs[0].MIGTable == "" {
				var usage *cliutil.UsageError
				if !errors.As(err, &usage) {
					t.Fatalf("err %v, want a usage error for a profile without MIG-capable GPUs", err)
				}
				if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
					t.Errorf("a refused profile was written: %v", statErr)
				}
				refused++
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			written++
			if got != path {
				t.Errorf("wrote %s, want %s", got, path)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			q, err := sim.Parse(f, path)
			if err != nil {
				t.Fatalf("the written profile does not parse: %v", err)
			}
			if len(q.GPUs) != len(p.GPUs) {
				t.Fatalf("%d GPUs, want %d", len(q.GPUs), len(p.GPUs))
			}
			for i, g := range q.GPUs {
				if g.Model != p.GPUs[i].Model || g.NUMANode != p.GPUs[i].NUMANode {
					t.Errorf("GPU %d is %s on NUMA %d, want %s on %d", i, g.Model, g.NUMANode, p.GPUs[i].Model, p.GPUs[i].NUMANode)
				}
				if g.MIGEnabled != (i < 2) {
					t.Errorf("GPU %d MIG mode %v, want %v", i, g.MIGEnabled, i < 2)
				}
				if len(g.MIGDevices) != 0 {
					t.Errorf("GPU %d starts with MIG devices %v; claims create them", i, g.MIGDevices)
				}
			}
			if len(p.Links) > 1 && len(p.Links[0]) > 1 && q.Links[0][1].NVLinks != p.Links[0][1].NVLinks {
				t.Errorf("GPUs 0 and 1 have %d NVLinks, want %d", q.Links[0][1].NVLinks, p.Links[0][1].NVLinks)
			}
		})
	}
	t.Logf("%d built-in profiles written, %d refused", written, refused)
	if written == 0 {
		t.Error("no built-in profile has MIG-capable GPUs to write")
	}
	t.Run("an unknown profile", func(t *testing.T) {
		var usage *cliutil.UsageError
		if _, err := writeMIGDynamicProfile("no-such-profile", filepath.Join(t.TempDir(), "p.yaml")); !errors.As(err, &usage) {
			t.Errorf("err %v, want a usage error", err)
		}
	})
}
