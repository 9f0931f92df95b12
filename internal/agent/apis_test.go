package agent

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/reasons"
)

// Where the cluster does not serve resource.k8s.io/v1 the DRA driver is
// off, with a reason naming the API, and the Node is told by an event.
func TestDRANotServed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		served []*metav1.APIResourceList
		off    bool
	}{
		{"served", []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}}}}, false},
		{"only v1beta2", []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1beta2", APIResources: []metav1.APIResource{{Name: "resourceslices"}}}}, true},
		{"none", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.served}}
			why, off, err := draNotServed(d)
			if err != nil {
				t.Fatal(err)
			}
			if off != tc.off {
				t.Fatalf("DRA off: %v, want %v (%s)", off, tc.off, why)
			}
			if !off {
				return
			}
			if !strings.Contains(why, "resource.k8s.io/v1") || !strings.Contains(why, "device plugin") {
				t.Errorf("reason %q names neither the API nor what serves the GPUs instead", why)
			}
			rec := record.NewFakeRecorder(1)
			recordAPINotServed(rec, "gpu-0", why)
			if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning "+gpunode.EventReasonAPINotServed+" ") || !strings.Contains(ev, why) || !strings.Contains(ev, reasons.URL(gpunode.EventReasonAPINotServed)) {
				t.Errorf("event %q, want a Warning %s with the reason and its troubleshooting entry", ev, gpunode.EventReasonAPINotServed)
			}
		})
	}
}

// With the driver off, a node to be served through DRA only is served
// through the device plugin.
func TestDRAOffFallsBackToTheDevicePlugin(t *testing.T) {
	got, notes := chooseGPUAPI(gpuAPIInputs{flag: gpunode.GPUAPIDRA, draOn: false})
	if got != gpunode.GPUAPIDevicePlugin || len(notes) == 0 {
		t.Fatalf("DRA-only with the driver off: %s %v, want device-plugin with a note", got, notes)
	}
}
