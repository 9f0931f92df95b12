package localcluster

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// clusterName names the control plane inside generated kubeconfigs.
const clusterName = "gpuplane"

// writeKubeconfig writes a self-contained kubeconfig (certificates inline)
// for one client identity.
func writeKubeconfig(path, server string, caPEM []byte, user string, kp keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: kp.CertPEM,
		ClientKeyData:         kp.KeyPEM,
	}
	ctxName := user + "@" + clusterName
	cfg.Contexts[ctxName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = ctxName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing the kubeconfig of %s to %s: %w", user, path, err)
	}
	return nil
}

// restConfigFor returns a client configuration authenticating with kp.
// Rate limits are raised well above client-go's defaults (5 QPS): the callers
// are tests and benchmarks that create thousands of objects.
func restConfigFor(server string, caPEM []byte, kp keyPair) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: kp.CertPEM,
			KeyData:  kp.KeyPEM,
		},
		QPS:   5000,
		Burst: 10000,
	}
}
