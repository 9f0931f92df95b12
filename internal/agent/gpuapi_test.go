package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

type fakeNodes struct {
	labels map[string]string
	err    error
}

func (f fakeNodes) Get(context.Context, string) (*corev1.Node, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: f.labels}}, nil
}

func TestGPUAPI(t *testing.T) {
	label := func(v string) fakeNodes { return fakeNodes{labels: map[string]string{gpunode.LabelGPUAPI: v}} }
	tests := []struct {
		name    string
		flag    string
		dra     bool
		nodes   nodeGetter
		want    gpunode.GPUAPI
		wantErr bool
	}{
		{name: "flag default", flag: "both", dra: true, nodes: fakeNodes{}, want: gpunode.GPUAPIBoth},
		{name: "label overrides the flag", flag: "both", dra: true, nodes: label("dra"), want: gpunode.GPUAPIDRA},
		{name: "label to the device plugin", flag: "dra", dra: true, nodes: label("device-plugin"), want: gpunode.GPUAPIDevicePlugin},
		{name: "bad label keeps the flag", flag: "dra", dra: true, nodes: label("DRA-only"), want: gpunode.GPUAPIDRA},
		{name: "unreadable node keeps the flag", flag: "dra", dra: true, nodes: fakeNodes{err: errors.New("forbidden")}, want: gpunode.GPUAPIDRA},
		{name: "no API server", flag: "device-plugin", dra: true, want: gpunode.GPUAPIDevicePlugin},
		{name: "dra without the driver keeps the plugin", flag: "both", dra: false, nodes: label("dra"), want: gpunode.GPUAPIDevicePlugin},
		{name: "bad flag", flag: "drA", dra: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gpuAPI(context.Background(), tt.flag, tt.dra, 0, tt.nodes, "n", slog.New(slog.DiscardHandler))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("gpuAPI = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestChooseGPUAPIKeepsDRAForPreparedClaims: a node moved off DRA keeps
// the driver while its checkpoint holds claims (or cannot be read), since
// nothing else would hold their GPUs against the device plugin.
func TestChooseGPUAPIKeepsDRAForPreparedClaims(t *testing.T) {
	tests := []struct {
		name     string
		in       gpuAPIInputs
		want     gpunode.GPUAPI
		wantNote string
	}{
		{name: "no claims: the label", in: gpuAPIInputs{flag: gpunode.GPUAPIBoth, label: "device-plugin", labelled: true, draOn: true},
			want: gpunode.GPUAPIDevicePlugin},
		{name: "prepared claims keep the driver", in: gpuAPIInputs{flag: gpunode.GPUAPIBoth, label: "device-plugin", labelled: true, draOn: true, prepared: 2},
			want: gpunode.GPUAPIBoth, wantNote: "2 ResourceClaims are prepared"},
		{name: "unreadable checkpoint keeps the driver", in: gpuAPIInputs{flag: gpunode.GPUAPIDevicePlugin, draOn: true, prepared: -1},
			want: gpunode.GPUAPIBoth, wantNote: "cannot be read"},
		{name: "without --dra there is no driver to keep", in: gpuAPIInputs{flag: gpunode.GPUAPIDevicePlugin, prepared: 3},
			want: gpunode.GPUAPIDevicePlugin},
		{name: "to DRA with claims", in: gpuAPIInputs{flag: gpunode.GPUAPIBoth, label: "dra", labelled: true, draOn: true, prepared: 1},
			want: gpunode.GPUAPIDRA},
		{name: "unset label: the flag", in: gpuAPIInputs{flag: gpunode.GPUAPIDRA, draOn: true},
			want: gpunode.GPUAPIDRA},
		{name: "bad label: the flag, said", in: gpuAPIInputs{flag: gpunode.GPUAPIDRA, label: "yes", labelled: true, draOn: true},
			want: gpunode.GPUAPIDRA, wantNote: "not valid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes := chooseGPUAPI(tt.in)
			if got != tt.want {
				t.Errorf("chooseGPUAPI = %q, want %q (notes %q)", got, tt.want, notes)
			}
			joined := strings.Join(notes, "; ")
			if (tt.wantNote == "") != (joined == "") || !strings.Contains(joined, tt.wantNote) {
				t.Errorf("notes %q, want one saying %q", joined, tt.wantNote)
			}
		})
	}
}
