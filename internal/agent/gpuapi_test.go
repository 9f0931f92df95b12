package agent

import (
	"context"
	"errors"
	"log/slog"
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
			got, err := gpuAPI(context.Background(), tt.flag, tt.dra, tt.nodes, "n", slog.New(slog.DiscardHandler))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("gpuAPI = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
