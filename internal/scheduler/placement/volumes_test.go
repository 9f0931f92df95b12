package placement

import (
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// volumeNodes are three CPU nodes; c allows one attached volume of the
// driver "ebs".
func volumeNodes() []model.Node {
	nodes := []model.Node{gpuNode("a", 8000, 0), gpuNode("b", 8000, 0), gpuNode("c", 8000, 0)}
	nodes[2].Volumes = &model.NodeVolumes{Limits: []model.AttachLimit{{Driver: "ebs", Max: 1}}}
	return nodes
}

func claimReq(claim string, provision bool, pvs ...model.PV) *model.Request {
	return &model.Request{MilliCPU: 100, Volumes: &model.PodVolumes{Claims: []model.ClaimNeed{{Claim: claim, PVs: pvs, Provision: provision}}}}
}

func TestVolumeBindingTakesEachPVOnce(t *testing.T) {
	st := NewState(volumeNodes())
	local := model.PV{Name: "local-b", Nodes: []string{"b"}}
	anywhere := model.PV{Name: "shared"}
	req := claimReq("ns/data", false, local, anywhere)
	if why := st.Why(0, req); why != "" {
		t.Fatalf("node a refused with %q; the PV without node affinity serves it", why)
	}
	m := st.Checkpoint()
	if err := st.Assign(1, req, nil); err != nil {
		t.Fatal(err)
	}
	if got := st.LastVolumes(); !slices.Equal(got, []string{"local-b"}) {
		t.Fatalf("the pod on b took %v, want the PV local to b", got)
	}
	// Another pod of the cycle with a claim on the same PVs gets the other.
	other := claimReq("ns/data2", false, local, anywhere)
	if why := st.Why(1, other); why != "" {
		t.Fatalf("node b refused the second claim with %q; the PV without affinity is left", why)
	}
	if err := st.Assign(1, other, nil); err != nil {
		t.Fatal(err)
	}
	if got := st.LastVolumes(); !slices.Equal(got, []string{"shared"}) {
		t.Fatalf("the second pod took %v, want shared", got)
	}
	third := claimReq("ns/data3", false, local, anywhere)
	for i := range st.Nodes {
		if why := st.Why(i, third); why != FilterVolumeBinding {
			t.Fatalf("node %d: Why = %q with both PVs taken, want %q", i, why, FilterVolumeBinding)
		}
		if st.Options(i, third) != nil {
			t.Fatalf("node %d offers options with both PVs taken", i)
		}
	}
	st.Rollback(m)
	if why := st.Why(1, third); why != "" {
		t.Fatalf("after rollback node b refuses with %q; both PVs are free again", why)
	}
	// What a cycle took ends with it: the next snapshot no longer offers
	// the PVs it bound.
	if err := st.Assign(1, req, nil); err != nil {
		t.Fatal(err)
	}
	onlyLocal := claimReq("ns/data4", false, local)
	if why := st.Why(1, onlyLocal); why != FilterVolumeBinding {
		t.Fatalf("before Commit node b: Why = %q with its PV taken, want %q", why, FilterVolumeBinding)
	}
	st.Commit()
	if why := st.Why(1, onlyLocal); why != "" {
		t.Fatalf("after Commit node b refuses with %q", why)
	}
}

func TestVolumeBindingProvisionsWhereNoPVIsLeft(t *testing.T) {
	st := NewState(volumeNodes())
	req := claimReq("ns/data", true, model.PV{Name: "local-b", Nodes: []string{"b"}})
	if err := st.Assign(0, req, nil); err != nil {
		t.Fatal(err)
	}
	if got := st.LastVolumes(); !slices.Equal(got, []string{""}) {
		t.Fatalf("on a, where the PV cannot go, the claim took %v, want a volume provisioned", got)
	}
	if err := st.Assign(1, req, nil); err != nil {
		t.Fatal(err)
	}
	if got := st.LastVolumes(); !slices.Equal(got, []string{"local-b"}) {
		t.Fatalf("on b the claim took %v, want the PV there before provisioning", got)
	}
	// Two claims of one pod never take one PV.
	two := &model.Request{Volumes: &model.PodVolumes{Claims: []model.ClaimNeed{
		{Claim: "x", PVs: []model.PV{{Name: "p1"}}}, {Claim: "y", PVs: []model.PV{{Name: "p1"}}},
	}}}
	if why := st.Why(0, two); why != FilterVolumeBinding {
		t.Fatalf("two claims with one PV: Why = %q, want %q", why, FilterVolumeBinding)
	}
}

func TestVolumeLimitsCountDistinctVolumes(t *testing.T) {
	st := NewState(volumeNodes())
	attach := func(ids ...string) *model.Request {
		v := &model.PodVolumes{}
		for _, id := range ids {
			v.Attach = append(v.Attach, model.Attachment{Driver: "ebs", ID: id})
		}
		return &model.Request{MilliCPU: 100, Volumes: v}
	}
	if err := st.Assign(2, attach("v1"), nil); err != nil {
		t.Fatal(err)
	}
	m := st.Checkpoint()
	// The same volume again is attached already: it counts nothing.
	if err := st.Assign(2, attach("v1", "v1"), nil); err != nil {
		t.Fatalf("a second pod of the attached volume: %v", err)
	}
	if why := st.Why(2, attach("v2")); why != FilterVolumeLimits {
		t.Fatalf("a second volume on c: Why = %q, want %q", why, FilterVolumeLimits)
	}
	if why := st.Why(0, attach("v2")); why != "" {
		t.Fatalf("node a has no limit, yet refuses with %q", why)
	}
	if why := st.Why(2, attach("v1")); why != "" {
		t.Fatalf("the attached volume again is refused with %q", why)
	}
	if why := st.Why(2, &model.Request{Volumes: &model.PodVolumes{Attach: []model.Attachment{{Driver: "nfs", ID: "v9"}}}}); why != "" {
		t.Fatalf("a driver without a limit is refused with %q", why)
	}
	st.Rollback(m)
	st.Release(2, attach("v1"), nil)
	if why := st.Why(2, attach("v2")); why != "" {
		t.Fatalf("after the one pod of v1 left, c refuses v2 with %q", why)
	}
}

func TestVolumeRestrictionsExclusiveUse(t *testing.T) {
	st := NewState(volumeNodes())
	rwop := &model.Request{MilliCPU: 100, Volumes: &model.PodVolumes{Exclusive: []string{"ns/db"}}}
	m := st.Checkpoint()
	if err := st.Assign(0, rwop, nil); err != nil {
		t.Fatal(err)
	}
	for i := range st.Nodes {
		if why := st.Why(i, rwop); why != FilterVolumeInUse {
			t.Fatalf("node %d: Why = %q for a second user of a ReadWriteOncePod claim, want %q", i, why, FilterVolumeInUse)
		}
	}
	st.Rollback(m)
	if why := st.Why(1, rwop); why != "" {
		t.Fatalf("after rollback the claim is refused with %q", why)
	}
}

// TestPlacerVolumesScanFresh: the Placer never serves a pod with volumes
// from what it remembered of a node, since taking a PV on one node changes
// what the others offer.
func TestPlacerVolumesScanFresh(t *testing.T) {
	st := NewState(volumeNodes())
	p := bestFitPlacer(t, st)
	pv := model.PV{Name: "zonal", Nodes: []string{"a", "b"}}
	first := claimReq("ns/one", false, pv)
	o, ok := p.Place(first)
	if !ok {
		t.Fatal("the first claim found no node")
	}
	if err := st.Assign(o.Node, first, o.Shares); err != nil {
		t.Fatal(err)
	}
	second := claimReq("ns/two", false, pv)
	if o, ok := p.Place(second); ok {
		t.Fatalf("the second claim of the one PV was placed on node %d", o.Node)
	}
}

// TestVolumeBindingProvisionsOnlyWhereTheClassAllows: where its class's
// allowed topologies leave out a node, a claim whose PV there is taken is
// not provisioned there either.
func TestVolumeBindingProvisionsOnlyWhereTheClassAllows(t *testing.T) {
	st := NewState(volumeNodes())
	pv := model.PV{Name: "local-b", Nodes: []string{"b"}}
	req := &model.Request{Volumes: &model.PodVolumes{Claims: []model.ClaimNeed{{Claim: "x", PVs: []model.PV{pv}, Provision: true, ProvisionNodes: []string{"a"}}}}}
	if err := st.Assign(1, req, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", FilterVolumeBinding, FilterVolumeBinding} {
		if why := st.Why(i, req); why != want {
			t.Fatalf("node %d: Why = %q, want %q", i, why, want)
		}
	}
	if StaticFits(st.Nodes[2].Node, req) {
		t.Fatal("node c fits statically, where neither the PV nor provisioning may go")
	}
}
