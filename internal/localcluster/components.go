package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Fixed network settings of the simulated cluster.
const (
	serviceCIDR      = "10.0.0.0/16"
	serviceClusterIP = "10.0.0.1" // first address of serviceCIDR: the kubernetes Service
	podCIDR          = "10.128.0.0/12"
	saIssuer         = "https://kubernetes.default.svc.cluster.local"
	kwokLeaseSeconds = 40
	// frontProxyClient is the common name of kube-apiserver's
	// aggregation-layer client certificate.
	frontProxyClient = "front-proxy-client"
)

// files are the paths Start generates before it launches anything.
type files struct {
	caCert, caKey               string
	apiCert, apiKey             string
	componentCert, componentKey string // serving cert of controller-manager and scheduler
	saKey, saPub                string
	// The aggregation layer's: the CA that vouches for the front proxy,
	// and the client certificate kube-apiserver proxies with.
	frontProxyCA                  string
	proxyClientCert, proxyKey     string
	adminKubeconfig               string
	kcmKubeconfig, schedKubeconfg string
	kwokKubeconfig                string
	schedulerConfig               string
	kwokConfig                    string
}

func hostPort(port int) string { return loopback + ":" + strconv.Itoa(port) }

func etcdArgs(dataDir string, clientPort, peerPort int) []string {
	client := "http://" + hostPort(clientPort)
	peer := "http://" + hostPort(peerPort)
	return []string{
		"--name=default",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// The data is thrown away with the control plane; fsync only costs time.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func apiServerArgs(f files, certDir string, port, etcdPort int, extra []string) []string {
	args := []string{
		"--etcd-servers=http://" + hostPort(etcdPort),
		"--bind-address=" + loopback,
		"--advertise-address=" + loopback,
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + f.apiCert,
		"--tls-private-key-file=" + f.apiKey,
		"--client-ca-file=" + f.caCert,
		"--authorization-mode=Node,RBAC",
		// The default plugin set plus NodeRestriction, as kubeadm clusters run.
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=" + saIssuer,
		"--service-account-key-file=" + f.saPub,
		"--service-account-signing-key-file=" + f.saKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// The kubernetes Service cannot have a loopback endpoint; nothing in a
		// simulated cluster dials it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		// The aggregation layer: kube-apiserver proxies an APIService's
		// requests with the front proxy's client certificate and the
		// caller's identity in these headers, which the extension server
		// trusts through the CA published in kube-system's
		// extension-apiserver-authentication ConfigMap. Without
		// kube-proxy, a Service's ClusterIP leads nowhere: route to its
		// endpoints instead.
		"--requestheader-client-ca-file=" + f.frontProxyCA,
		"--requestheader-allowed-names=" + frontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f.proxyClientCert,
		"--proxy-client-key-file=" + f.proxyKey,
		"--enable-aggregator-routing=true",
	}
	return append(args, extra...)
}

func controllerManagerArgs(f files, port int, qps float32, burst int32) []string {
	return []string{
		"--kubeconfig=" + f.kcmKubeconfig,
		"--authentication-kubeconfig=" + f.kcmKubeconfig,
		"--authorization-kubeconfig=" + f.kcmKubeconfig,
		"--client-ca-file=" + f.caCert,
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.componentCert,
		"--tls-private-key-file=" + f.componentKey,
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + f.saKey,
		"--root-ca-file=" + f.caCert,
		"--cluster-signing-cert-file=" + f.caCert,
		"--cluster-signing-key-file=" + f.caKey,
		"--kube-api-qps=" + strconv.FormatFloat(float64(qps), 'f', -1, 32),
		"--kube-api-burst=" + strconv.Itoa(int(burst)),
		"--profiling=false",
	}
}

func schedulerArgs(f files, port int) []string {
	return []string{
		"--config=" + f.schedulerConfig,
		"--authentication-kubeconfig=" + f.schedKubeconfg,
		"--authorization-kubeconfig=" + f.schedKubeconfg,
		"--client-ca-file=" + f.caCert,
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.componentCert,
		"--tls-private-key-file=" + f.componentKey,
	}
}

// writeSchedulerConfig writes kube-scheduler's configuration: no leader
// election (one instance) and the raised client rate limits.
func writeSchedulerConfig(path, kubeconfig string, qps float32, burst int32) error {
	cfg := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %v
  burst: %d
leaderElection:
  leaderElect: false
`, kubeconfig, qps, burst)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("writing the kube-scheduler configuration: %w", err)
	}
	return nil
}

func kwokArgs(f files, port int) []string {
	return []string{
		"--kubeconfig=" + f.kwokKubeconfig,
		"--config=" + f.kwokConfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeAnnotationValue,
		"--node-lease-duration-seconds=" + strconv.Itoa(kwokLeaseSeconds),
		"--cidr=" + podCIDR,
		"--server-address=" + hostPort(port),
	}
}

// kwokOptions raises kwok's worker counts above its defaults (4 each), which
// cap node start-up at a few dozen nodes per second when the API server
// answers in tens of milliseconds.
const kwokOptions = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodePlayStageParallelism: 32
  nodeLeaseParallelism: 32
  podPlayStageParallelism: 32
`

// writeKwokConfig writes the one configuration file kwok reads: its options,
// then the chosen stage files (paths relative to stagesDir).
func writeKwokConfig(path, stagesDir string, stages []string) error {
	var b strings.Builder
	b.WriteString("---\n" + kwokOptions)
	for _, s := range stages {
		if filepath.IsAbs(s) || strings.Contains(filepath.ToSlash(s), "../") {
			return fmt.Errorf("localcluster config: KwokStages: %q must be a path inside %s", s, stagesDir)
		}
		data, err := os.ReadFile(filepath.Join(stagesDir, s))
		if err != nil {
			return fmt.Errorf("reading kwok stage %s: %w (run `make controlplane-bins` to copy kwok's stages beside its binary)", s, err)
		}
		b.WriteString("---\n")
		b.Write(data)
		if len(data) > 0 && data[len(data)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing the kwok configuration: %w", err)
	}
	return nil
}
