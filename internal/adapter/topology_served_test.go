package adapter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// servedResources is a discovery whose served resources a test changes
// while the scheduler reads it, as installing a CRD does.
type servedResources struct {
	discovery.DiscoveryInterface
	mu     sync.Mutex
	served map[string][]string
	looks  int
}

func (d *servedResources) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.looks++
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, r := range d.served[gv] {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r})
	}
	if len(list.APIResources) == 0 {
		// The fake's answer for a group version it does not serve: 404.
		return d.DiscoveryInterface.ServerResourcesForGroupVersion(gv)
	}
	return list, nil
}

func (d *servedResources) serve(gvr schema.GroupVersionResource) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.served[gvr.GroupVersion().String()] = append(d.served[gvr.GroupVersion().String()], gvr.Resource)
}

func (d *servedResources) lookups() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.looks
}

// Kueue's and KAI's Topology resources served only after the scheduler
// started are found by the re-check and read from then on; once both are,
// discovery is asked no more.
func TestForeignTopologyServedLater(t *testing.T) {
	kueue := build.ForeignTopology("kueue.x-k8s.io/v1beta2", "kueue-net", blockKey, rackKey, hostKey)
	kai := build.ForeignTopology("kai.scheduler/v1alpha1", "kai-net", rackKey, cliqueKey, hostKey)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		KueueTopologiesV1beta2: "TopologyList", KueueTopologiesV1beta1: "TopologyList", KAITopologies: "TopologyList",
	}, kueue, kai)
	disc := &servedResources{DiscoveryInterface: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}, served: map[string][]string{}}
	c := newClusterCache("gpuplane-scheduler")
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	w := &foreignTopologyWatch{c: c, disc: disc, factory: factory, log: logr.Discard()}
	ctx, cancel := context.WithCancel(t.Context())
	defer factory.Shutdown()
	defer cancel()

	if regs := w.look(ctx); len(regs) != 0 || !w.missing() {
		t.Fatalf("nothing served: %d informers, missing %v; want none and missing", len(regs), w.missing())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, 5*time.Millisecond)
	}()
	levels := func(name string) []string {
		_, l, err := c.topologies.Levels(name)
		if err != nil {
			return nil
		}
		return l
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Still not served: re-checked, and nothing read.
	wait("a re-check", func() bool { return disc.lookups() > 6 })
	if l := levels("kueue-net"); l != nil {
		t.Fatalf("Kueue's Topology read before its resource is served: %v", l)
	}
	disc.serve(KueueTopologiesV1beta2)
	wait("Kueue's Topology read", func() bool { return len(levels("kueue-net")) == 3 })
	if l := levels("kai-net"); l != nil {
		t.Fatalf("KAI's Topology read before its resource is served: %v", l)
	}
	disc.serve(KAITopologies)
	wait("KAI's Topology read", func() bool { return len(levels("kai-net")) == 3 })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the re-check goes on with both resources read")
	}
	if w.missing() {
		t.Fatal("a source still missing with both read")
	}
	if got := levels("kai-net"); got[0] != rackKey || got[1] != cliqueKey {
		t.Fatalf("KAI's Topology read as %v", got)
	}
	// Objects made after the informer started are read too.
	later := build.ForeignTopology("kai.scheduler/v1alpha1", "kai-later", rackKey, hostKey)
	if _, err := dyn.Resource(KAITopologies).Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("a KAI Topology made later", func() bool { return len(levels("kai-later")) == 2 })
}
