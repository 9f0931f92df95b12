package dev

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
)

// ensureMIGConfigMap creates, for agents started without the chart, the
// ConfigMap of mig-parted's default configs the chart would deploy, in the
// chart's namespace: a node labelled nvidia.com/mig.config=<name> is then
// partitioned as on an installed cluster. An existing one is kept (the
// user may have edited it).
func ensureMIGConfigMap(ctx context.Context, client kubernetes.Interface) error {
	data, err := helmchart.MIGPartedConfig()
	if err != nil {
		return fmt.Errorf("reading the chart's mig-parted config: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmchart.DefaultNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s for the MIG ConfigMap: %w", helmchart.DefaultNamespace, err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: helmchart.DefaultNamespace, Name: helmchart.MIGConfigMap},
		Data:       map[string]string{helmchart.MIGConfigKey: string(data)},
	}
	if _, err := client.CoreV1().ConfigMaps(helmchart.DefaultNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the MIG ConfigMap %s/%s: %w", helmchart.DefaultNamespace, helmchart.MIGConfigMap, err)
	}
	return nil
}
