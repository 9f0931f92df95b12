package adapter

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"

	"github.com/gpuplane/gpuplane/api/buildinfo"
)

// recordBuild writes the leader's build on its leader Lease
// (buildinfo.SchedulerAnnotation), so that `gpuplane version` can say what
// schedules. The Lease is written with get and update, the verbs leader
// election already holds; an update that races a renewal is retried. It
// tries until it succeeds or ctx ends, backing off from retryEvery: the
// annotation is not worth stopping the scheduler for.
func recordBuild(ctx context.Context, leases coordinationv1.LeasesGetter, namespace, name string, info buildinfo.Info, retryEvery time.Duration, log logr.Logger) {
	value, err := buildinfo.Encode(info)
	if err != nil {
		log.Error(err, "not recording the scheduler's build on its Lease")
		return
	}
	backoff := wait.Backoff{Duration: retryEvery, Factor: 2, Steps: 1 << 30, Cap: time.Minute}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			l, err := leases.Leases(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Annotations[buildinfo.SchedulerAnnotation] == value {
				return nil
			}
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[buildinfo.SchedulerAnnotation] = value
			_, err = leases.Leases(namespace).Update(ctx, l, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			log.Error(fmt.Errorf("lease %s/%s: %w", namespace, name, err), "cannot record the scheduler's build on its Lease; retrying")
			return false, nil
		}
		log.V(2).Info("recorded the scheduler's build on its Lease", "lease", namespace+"/"+name, "version", info.Version)
		return true, nil
	})
}
