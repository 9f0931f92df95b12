package adapter

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// clusterWriter is what the loop asks of the API server to carry out the
// core's decisions. apiWriter is the real one; tests use an in-memory fake,
// so that gang binding, evictions and cleanup are checked without an API
// server (the integration tier checks them with one).
type clusterWriter interface {
	// bind binds one pod; t.done runs with the result.
	bind(ctx context.Context, t bindTask)
	// bindGang records a gang's placement on its PodGroup, then binds
	// its members; committed runs with the record's result first.
	bindGang(ctx context.Context, pg *v1alpha1.PodGroup, placement []v1alpha1.MemberPlacement, members []bindTask, committed func(error))
	// evict gives a victim notice n (notice.go), then asks for its
	// eviction with n's grace period; done(true) when either was refused.
	evict(ctx context.Context, pod *corev1.Pod, n notice, forGroup, reason string, done func(refused bool))
	// deletePod removes a pod of a gang left partly bound.
	deletePod(ctx context.Context, pod *corev1.Pod, why string)
	// ungate lifts gpuplane's scheduling gate from a pending pod
	// (gates.go); the next cycle sees whether it did.
	ungate(ctx context.Context, pod *corev1.Pod)
}

// statusSink is where the loop says what it decided and why: events, pod
// conditions, and PodGroup and Queue status. statusWriter writes them at a
// bounded rate; tests record them.
type statusSink interface {
	event(obj runtime.Object, typ, reason, msg string)
	podCondition(pod *corev1.Pod, reason, msg string)
	updateStatus(key string, gvr schema.GroupVersionResource, namespace string, obj runtime.Object)
}

var (
	_ clusterWriter = (*apiWriter)(nil)
	_ statusSink    = (*statusWriter)(nil)
)
