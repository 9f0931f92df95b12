package metrics

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestParseCgroup(t *testing.T) {
	const uid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	const cid = "5f1c2d3e4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	tests := []struct {
		name    string
		content string
		want    ContainerRef
		wantOK  bool
	}{
		{
			name:    "v2 systemd containerd",
			content: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice/cri-containerd-" + cid + ".scope\n",
			want:    ContainerRef{PodUID: uid, ContainerID: cid}, wantOK: true,
		},
		{
			name:    "v2 systemd guaranteed crio",
			content: "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice/crio-" + cid + ".scope\n",
			want:    ContainerRef{PodUID: uid, ContainerID: cid}, wantOK: true,
		},
		{
			name:    "v2 below a cgroup namespace root",
			content: "0::/../../kubepods-besteffort-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice/cri-containerd-" + cid + ".scope\n",
			want:    ContainerRef{PodUID: uid, ContainerID: cid}, wantOK: true,
		},
		{
			name:    "v2 cgroupfs",
			content: "0::/kubepods/besteffort/pod" + uid + "/" + cid + "\n",
			want:    ContainerRef{PodUID: uid, ContainerID: cid}, wantOK: true,
		},
		{
			name:    "v1 cgroupfs with many controllers",
			content: "12:hugetlb:/\n11:memory:/kubepods/burstable/pod" + uid + "/" + cid + "\n1:name=systemd:/kubepods/burstable/pod" + uid + "/" + cid + "\n",
			want:    ContainerRef{PodUID: uid, ContainerID: cid}, wantOK: true,
		},
		{
			name:    "v1 docker systemd",
			content: "4:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice/docker-" + cid + ".scope\n",
			want:    ContainerRef{PodUID: uid, ContainerID: cid}, wantOK: true,
		},
		{name: "host process v2", content: "0::/system.slice/nvidia-persistenced.service\n"},
		{name: "host process v1", content: "11:memory:/user.slice\n"},
		{name: "pod prefix without a uid", content: "0::/kubepods/podcast/x\n"},
		{name: "empty", content: ""},
		{name: "garbage", content: "not a cgroup file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseCgroup([]byte(tt.content))
			if ok != tt.wantOK || got != tt.want {
				t.Fatalf("ParseCgroup = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestProcCgroupsForgetsGonePIDs(t *testing.T) {
	root := t.TempDir()
	write := func(pid, uid string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte("0::/kubepods/pod"+uid+"/c\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const uid1, uid2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	write("42", uid1)
	p := newProcCgroups(root)
	steps := []struct {
		name    string
		before  func()
		wantUID string
	}{
		{name: "first read", wantUID: uid1},
		{name: "cached while seen", before: func() { write("42", uid2) }, wantUID: uid1},
		{name: "re-read after the PID was not seen", before: func() { p.begin(); p.end() }, wantUID: uid2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before()
			}
			p.begin()
			ref, ok := p.lookup(42)
			p.end()
			if !ok || ref.PodUID != st.wantUID {
				t.Fatalf("lookup = %+v, %v; want pod %s", ref, ok, st.wantUID)
			}
		})
	}
	if _, ok := p.lookup(43); ok {
		t.Error("lookup of a PID without a proc entry succeeded")
	}
}

func TestCheckpointFormats(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    map[string]string
		wantErr bool
	}{
		{
			name:    "per NUMA (1.20+)",
			content: `{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"c","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-a::1"],"1":["GPU-b::2"]}}]},"Checksum":1}`,
			want:    map[string]string{"GPU-a::1": "u1", "GPU-b::2": "u1"},
		},
		{
			name:    "flat list (before 1.20)",
			content: `{"Data":{"PodDeviceEntries":[{"PodUID":"u2","ContainerName":"c","ResourceName":"nvidia.com/gpu","DeviceIDs":["GPU-a"]}]}}`,
			want:    map[string]string{"GPU-a": "u2"},
		},
		{name: "not json", content: "{", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ckpt")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			c := newKubeletCheckpoint(path)
			err := c.refresh()
			if (err != nil) != tt.wantErr {
				t.Fatalf("refresh = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && len(c.byDevice) != len(tt.want) {
				t.Fatalf("byDevice = %v, want %v", c.byDevice, tt.want)
			}
			for id, uid := range tt.want {
				if c.byDevice[id] != uid {
					t.Errorf("byDevice[%s] = %q, want %q", id, c.byDevice[id], uid)
				}
			}
		})
	}
	if err := newKubeletCheckpoint(filepath.Join(t.TempDir(), "absent")).refresh(); err == nil {
		t.Error("refresh of an absent checkpoint succeeded")
	}
}

func TestDeviceKey(t *testing.T) {
	e, err := NewExporter(Options{GPUs: nil})
	if err == nil || e != nil {
		t.Fatal("NewExporter accepted a nil backend")
	}
	e = &Exporter{byUUID: map[string]int{}}
	e.setDevices([]gpu.Device{
		{Index: 0, UUID: "GPU-a"},
		{Index: 1, UUID: "GPU-b", MIG: gpu.MIGMode{Current: true}, MIGDevices: []gpu.MIGDevice{{UUID: "MIG-b0"}, {UUID: "MIG-b1"}}},
	})
	tests := []struct {
		id, want string
		ok       bool
	}{
		{id: "GPU-a", want: "GPU-a", ok: true},
		{id: "GPU-a::7", want: "GPU-a", ok: true},
		{id: "MIG-b1", want: "MIG-b1", ok: true},
		{id: "MIG-b0::2", want: "MIG-b0", ok: true},
		{id: "1", want: "GPU-b", ok: true},
		{id: "0::3", want: "GPU-a", ok: true},
		{id: "1:1", want: "MIG-b1", ok: true},
		{id: "2", ok: false},
		{id: "1:5", ok: false},
		{id: "GPU-other", ok: false},
		{id: "amd.com/gpu-0", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			got, ok := e.deviceKey(tt.id)
			if ok != tt.ok || got != tt.want {
				t.Fatalf("deviceKey(%q) = %q, %v; want %q, %v", tt.id, got, ok, tt.want, tt.ok)
			}
		})
	}
}
