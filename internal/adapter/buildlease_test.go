package adapter

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuplane/gpuplane/api/buildinfo"
)

func TestRecordBuildAnnotatesTheLeaderLease(t *testing.T) {
	info := buildinfo.Info{Version: "v0.1.0", Commit: "abc", GoVersion: "go1.26.0"}
	holder := "replica-a"
	client := fake.NewClientset(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpuplane-scheduler", Namespace: "gpuplane-system",
		Annotations: map[string]string{"other": "kept"}}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}})
	// The first update loses a race with a renewal.
	conflicts := 1
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "gpuplane-scheduler", nil)
		}
		return false, nil, nil
	})
	ctx := context.Background()
	recordBuild(ctx, client.CoordinationV1(), "gpuplane-system", "gpuplane-scheduler", info, time.Millisecond, logr.Discard())
	l, err := client.CoordinationV1().Leases("gpuplane-system").Get(ctx, "gpuplane-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := buildinfo.Parse(buildinfo.SchedulerAnnotation, l.Annotations[buildinfo.SchedulerAnnotation])
	if err != nil || got != info {
		t.Errorf("lease annotation reads back as %+v, %v; want %+v", got, err, info)
	}
	if l.Annotations["other"] != "kept" || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder {
		t.Errorf("recording the build changed the rest of the Lease: %+v", l)
	}
	if conflicts != 0 {
		t.Error("the conflicting update was never tried")
	}
}

func TestRecordBuildStopsWithItsContext(t *testing.T) {
	client := fake.NewClientset() // no Lease: every try fails
	ctx, cancel := context.WithCancel(context.Background())
	tries := 0
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if tries++; tries == 3 {
			cancel()
		}
		return false, nil, nil
	})
	recordBuild(ctx, client.CoordinationV1(), "gpuplane-system", "gpuplane-scheduler", buildinfo.Info{Version: "v0.1.0"}, time.Millisecond, logr.Discard())
	if tries < 3 {
		t.Errorf("gave up after %d tries while its context was live", tries)
	}
}
