package dev

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// admissionWait bounds how long up waits for the API server to enforce
// the admission policies it installed.
const admissionWait = 30 * time.Second

// waitAdmission returns once the API server enforces gpuplane's admission
// policies (deploy/admission). It picks new policies up from a watch, a
// moment after they are created; a pod created before that would keep the
// spec it was written with, so up waits. Each check is a server-side dry
// run that creates nothing.
func waitAdmission(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, admissionWait)
	defer cancel()
	var last error
	for {
		if last = admissionActive(ctx, client); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server did not enforce gpuplane's admission policies within %s: %w", admissionWait, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// admissionActive checks each policy once with a dry-run pod.
func admissionActive(ctx context.Context, client kubernetes.Interface) error {
	pods := client.CoreV1().Pods(metav1.NamespaceDefault)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probe := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpuplane-admission-probe-" + name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}}}
	}
	// KAI's fractional pod: handed over, with a GPU device.
	kai := probe("kai")
	kai.Spec.SchedulerName = "kai-scheduler"
	kai.Annotations = map[string]string{"gpu-fraction": "0.5"}
	got, err := pods.Create(ctx, kai, dry)
	if err != nil {
		return err
	}
	if q := got.Spec.Containers[0].Resources.Limits[gpunode.ResourceGPU]; got.Spec.SchedulerName != v1alpha1.SchedulerName || q.Value() != 1 {
		return errors.New("kai-pods and gpu-fraction-device not enforced yet")
	}
	// HAMi's pod: handed over.
	hami := probe("hami")
	hami.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpunode.ResourceGPU: resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("1024")}
	if got, err = pods.Create(ctx, hami, dry); err != nil {
		return err
	}
	if got.Spec.SchedulerName != v1alpha1.SchedulerName {
		return errors.New("hami-pods not enforced yet")
	}
	// A pod without a GPU: GPUs hidden.
	if got, err = pods.Create(ctx, probe("plain"), dry); err != nil {
		return err
	}
	if len(got.Spec.Containers[0].Env) == 0 || got.Spec.Containers[0].Env[0].Value != "void" {
		return errors.New("hide-gpus not enforced yet")
	}
	// A privileged pod: refused.
	priv := probe("privileged")
	priv.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
	switch _, err = pods.Create(ctx, priv, dry); {
	case err == nil:
		return errors.New("gpu-access not enforced yet: a privileged pod was admitted")
	case !strings.Contains(err.Error(), "runs privileged"):
		return fmt.Errorf("gpu-access not enforced yet: %w", err)
	}
	return nil
}
