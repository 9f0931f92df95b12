package framework

import (
	"context"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// InstallCRDs creates every CustomResourceDefinition in the YAML files of
// dir (those that exist already are kept) and waits until the API server
// serves them. It returns a dynamic client for their objects.
func (e *Env) InstallCRDs(t TB, dir string) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("creating a dynamic client: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, err := localcluster.InstallCRDs(ctx, d, dir); err != nil {
		t.Fatalf("%v", err)
	}
	return d
}
