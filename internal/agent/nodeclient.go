package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/labels"
)

// nodeClient patches Nodes over a REST client that knows the core/v1
// types only. The agent uses it instead of client-go's clientset, whose
// scheme registers every API group at start-up: that alone more than
// doubled the agent's binary and resident memory.
type nodeClient struct {
	rest   rest.Interface
	params runtime.ParameterCodec
}

var _ labels.NodePatcher = (*nodeClient)(nil)

func newNodeClient(cfg *rest.Config) (*nodeClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the core/v1 types: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the API client: %w", err)
	}
	return &nodeClient{rest: c, params: runtime.NewParameterCodec(scheme)}, nil
}

// Patch implements labels.NodePatcher.
func (c *nodeClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.rest.Patch(pt).Resource("nodes").Name(name).SubResource(subresources...).
		VersionedParams(&opts, c.params).Body(data).Do(ctx).Into(out)
	if err != nil {
		return nil, err
	}
	return out, nil
}
