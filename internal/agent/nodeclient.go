package agent

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

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

// eventSink writes events over the node client (record.EventSink).
type eventSink struct{ rest rest.Interface }

var _ record.EventSink = eventSink{}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.rest.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(context.Background()).Into(out)
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.rest.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(context.Background()).Into(out)
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.rest.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(data).Do(context.Background()).Into(out)
}

// evict asks the Eviction API to evict a pod (pods/eviction), so that
// PodDisruptionBudgets hold; the UID precondition, when the UID is known,
// spares a pod recreated under the same name.
func (c *nodeClient) evict(ctx context.Context, p *corev1.Pod) error {
	ev := &policyv1.Eviction{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
	}
	if p.UID != "" {
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	// A refused eviction (429 with Retry-After) is the watch's to retry
	// later, not the client's to wait out.
	return c.rest.Post().MaxRetries(0).Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").Body(body).Do(ctx).Error()
}
