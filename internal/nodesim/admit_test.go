package nodesim

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func container(limits map[string]string) corev1.Container {
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
	for k, v := range limits {
		c.Resources.Limits[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return c
}

func TestPodDeviceNeeds(t *testing.T) {
	tests := []struct {
		name       string
		init, apps []map[string]string
		want       map[string]int
	}{
		{"no devices", nil, []map[string]string{{"cpu": "2", "memory": "1Gi"}}, map[string]int{}},
		{"apps add up", nil, []map[string]string{{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2", "cpu": "1"}}, map[string]int{"nvidia.com/gpu": 3}},
		{"init container larger than the apps", []map[string]string{{"nvidia.com/gpu": "4"}}, []map[string]string{{"nvidia.com/gpu": "1"}}, map[string]int{"nvidia.com/gpu": 4}},
		{"hugepages and kubernetes.io names are not devices", nil, []map[string]string{{"hugepages-2Mi": "2Mi", "example.kubernetes.io/x": "1", "nvidia.com/mig-1g.10gb": "2"}}, map[string]int{"nvidia.com/mig-1g.10gb": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{}
			for _, l := range tt.init {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, container(l))
			}
			for _, l := range tt.apps {
				pod.Spec.Containers = append(pod.Spec.Containers, container(l))
			}
			if got := podDeviceNeeds(pod); !maps.Equal(got, tt.want) {
				t.Errorf("podDeviceNeeds = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPodDeviceNeedsSkipsDRABacked: a resource the pod's
// extended-resource claim serves for a container is not the device
// plugin's to admit or allocate, as in the kubelet; the same resource of a
// container the claim does not name still is.
func TestPodDeviceNeedsSkipsDRABacked(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		container(map[string]string{"nvidia.com/gpu": "2"}), container(map[string]string{"nvidia.com/gpu": "1"}),
	}}}
	pod.Spec.Containers[1].Name = "other"
	pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "x",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: "nvidia.com/gpu", RequestName: "container-0-request-0"}}}
	if got, want := podDeviceNeeds(pod), map[string]int{"nvidia.com/gpu": 1}; !maps.Equal(got, want) {
		t.Errorf("podDeviceNeeds = %v, want %v: container c's GPUs come from its claim", got, want)
	}
}

func TestValidateRegistration(t *testing.T) {
	ok := func() *pluginapi.RegisterRequest {
		return &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "gpu.sock", ResourceName: "nvidia.com/gpu"}
	}
	tests := []struct {
		name    string
		mutate  func(*pluginapi.RegisterRequest)
		wantErr bool
	}{
		{"valid", func(*pluginapi.RegisterRequest) {}, false},
		{"old version", func(r *pluginapi.RegisterRequest) { r.Version = "v1alpha" }, true},
		{"no domain", func(r *pluginapi.RegisterRequest) { r.ResourceName = "gpu" }, true},
		{"kubernetes.io domain", func(r *pluginapi.RegisterRequest) { r.ResourceName = "kubernetes.io/gpu" }, true},
		{"endpoint outside the directory", func(r *pluginapi.RegisterRequest) { r.Endpoint = "../x.sock" }, true},
		{"no endpoint", func(r *pluginapi.RegisterRequest) { r.Endpoint = "" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok()
			tt.mutate(r)
			if err := validateRegistration(r); (err != nil) != tt.wantErr {
				t.Errorf("validateRegistration = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestReserveAndRelease(t *testing.T) {
	s := &Simulator{inUse: map[string]map[string]string{}}
	s.reserve("ns/a", "nvidia.com/gpu", []string{"g0", "g1"})
	s.reserve("ns/b", "nvidia.com/gpu", []string{"g2"})
	tests := []struct {
		name     string
		key      string
		wantFree bool
		left     int
	}{
		{"first pod", "ns/a", true, 1},
		{"again", "ns/a", false, 1},
		{"second pod", "ns/b", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.release(tt.key); got != tt.wantFree {
				t.Errorf("release(%s) = %v, want %v", tt.key, got, tt.wantFree)
			}
			if n := len(s.inUse["nvidia.com/gpu"]); n != tt.left {
				t.Errorf("%d devices in use, want %d", n, tt.left)
			}
		})
	}
}
