// Package clusterflags gives the gpuplane CLI's cluster commands kubectl's
// cluster flags (k8s.io/cli-runtime's genericclioptions). It is apart from
// cliutil because genericclioptions links kustomize, whose plugin loader
// imports Go's plugin package: a binary that links that beside go-nvml
// (gpuplane-agent) is bound at start and fails without the NVIDIA driver.
package clusterflags

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

// Annotation marks a command that talks to a cluster through
// Cluster, so that tests walking the command tree find every one.
const Annotation = "gpuplane.io/cluster"

// Cluster is how a command reaches the cluster: kubectl's flags
// (genericclioptions: --kubeconfig, --context, --cluster, --user,
// -n/--namespace, --as, --as-group, --as-uid, --as-user-extra,
// -s/--server, --token,
// --certificate-authority, --client-certificate, --client-key,
// --insecure-skip-tls-verify, --tls-server-name, --request-timeout,
// --disable-compression), read as kubectl reads them.
type Cluster struct {
	flags *genericclioptions.ConfigFlags
}

// ClusterScope says whether a command reads namespaced objects by
// namespace (and so takes -n/--namespace).
type ClusterScope bool

// Scopes of Add.
const (
	Namespaced    ClusterScope = true
	ClusterScoped ClusterScope = false
)

// Add registers the cluster flags on cmd and returns the
// Cluster that reads them. A ClusterScoped command has no -n.
func Add(cmd *cobra.Command, scope ClusterScope) *Cluster {
	f := genericclioptions.NewConfigFlags(false)
	f.CacheDir = nil // gpuplane keeps no discovery cache
	if scope == ClusterScoped {
		f.Namespace = nil
	}
	f.AddFlags(cmd.Flags())
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[Annotation] = "true"
	return &Cluster{flags: f}
}

// RESTConfig is the client configuration the flags and the kubeconfig
// give. With no kubeconfig, no --server and no in-cluster service
// account it is an UnreachableError saying where a kubeconfig is looked
// for, instead of a refused connection to localhost:8080.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	loader := c.flags.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, &cliutil.UnreachableError{Err: fmt.Errorf("loading the kubeconfig: %w", err)}
	}
	if !c.names(raw.Clusters) {
		return nil, &cliutil.UnreachableError{Err: errors.New("no cluster to talk to: no kubeconfig (give --kubeconfig, set $KUBECONFIG or write ~/.kube/config) and not in a pod")}
	}
	rc, err := c.flags.ToRESTConfig()
	if err != nil {
		return nil, &cliutil.UnreachableError{Err: fmt.Errorf("loading the kubeconfig: %w", err)}
	}
	return rc, nil
}

// Configured says whether the flags, a kubeconfig or the pod's service
// account name a cluster at all, for a command that also works without
// one (gpuplane version). A kubeconfig that does not load counts as
// configured: RESTConfig reports it.
func (c *Cluster) Configured() bool {
	raw, err := c.flags.ToRawKubeConfigLoader().RawConfig()
	return err != nil || c.names(raw.Clusters)
}

// names says whether the kubeconfig's clusters, --server or the pod's
// service account name a cluster.
func (c *Cluster) names(clusters map[string]*clientcmdapi.Cluster) bool {
	if len(clusters) > 0 || *c.flags.APIServer != "" {
		return true
	}
	_, err := rest.InClusterConfig()
	return err == nil
}

// Namespace is -n/--namespace, else the kubeconfig context's namespace,
// else default; explicit says whether -n gave it.
func (c *Cluster) Namespace() (ns string, explicit bool, err error) {
	if c.flags.Namespace == nil {
		return "", false, errors.New("this command takes no namespace")
	}
	ns, explicit, err = c.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", false, fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, explicit, nil
}

// Clients returns a typed and a dynamic client of the cluster.
func (c *Cluster) Clients() (*rest.Config, kubernetes.Interface, dynamic.Interface, error) {
	rc, err := c.RESTConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating an API client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating an API client: %w", err)
	}
	return rc, cs, dyn, nil
}
