package metricsapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
	"github.com/gpuplane/gpuplane/internal/custommetrics"
)

type options struct {
	cluster        *clusterflags.Cluster
	address        string
	certFile       string
	keyFile        string
	agents         string
	agentsPort     string
	agentsScheme   string
	agentsCAFile   string
	agentsServerNm string
	interval       time.Duration
	maxAge         time.Duration
}

// NewCommand returns the metrics-api command.
func NewCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "metrics-api",
		Short: "Serve each pod's GPU utilisation and memory to HorizontalPodAutoscalers (custom metrics API)",
		Long: `metrics-api serves ` + custommetrics.Group + `/` + custommetrics.Version + ` behind an
APIService, so that a HorizontalPodAutoscaler scales on GPU metrics with no
Prometheus and no adapter. Per pod it serves:

  ` + custommetrics.MetricGPUUtil + `  SM utilisation in percent, the mean over the pod's GPUs
  ` + custommetrics.MetricFBUsed + `   GPU memory used, in MiB, summed over its GPUs

It reads them from gpuplane-agent's /metrics on every node (the endpoints
of the agents' metrics Service, --agents) every --scrape-interval; a pod
whose agent has not answered within --max-age has no value. Requests are
accepted only through kube-apiserver's aggregation layer: the front proxy's
client certificate is checked against kube-system/extension-apiserver-
authentication, and the caller's access (get on ` + custommetrics.Group + `
pods/<metric>) is reviewed by kube-apiserver. The Helm chart runs it with
metricsAPI.enabled.`,
		Example: `  gpuplane metrics-api --agents gpuplane-system/gpuplane-agent-metrics \
    --tls-cert-file /tls/tls.crt --tls-private-key-file /tls/tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	o.cluster = clusterflags.Add(cmd, clusterflags.ClusterScoped)
	f := cmd.Flags()
	f.StringVar(&o.address, "secure-address", ":6443", "address to serve the API on (TLS)")
	f.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate (PEM), the one the APIService's caBundle vouches for")
	f.StringVar(&o.keyFile, "tls-private-key-file", "", "the serving certificate's key (PEM)")
	f.StringVar(&o.agents, "agents", "", "the agents' metrics Service, namespace/name")
	f.StringVar(&o.agentsPort, "agents-port-name", "metrics", "the name of the agents' metrics port in that Service")
	f.StringVar(&o.agentsScheme, "agents-scheme", "http", "http, or https when the agents serve TLS (agent.metrics.webConfigSecret)")
	f.StringVar(&o.agentsCAFile, "agents-ca-file", "", "CA (PEM) that signed the agents' serving certificates, with --agents-scheme https")
	f.StringVar(&o.agentsServerNm, "agents-tls-server-name", "", "name to check the agents' certificates for, with --agents-scheme https")
	f.DurationVar(&o.interval, "scrape-interval", 10*time.Second, "time between two reads of every agent")
	f.DurationVar(&o.maxAge, "max-age", 0, "how old a pod's values may be and still be served (default: three scrape intervals)")
	return cmd
}

func (o *options) run(ctx context.Context) error {
	ns, name, ok := strings.Cut(o.agents, "/")
	switch {
	case !ok || ns == "" || name == "":
		return cliutil.Usagef("--agents: want namespace/name of the agents' metrics Service, got %q", o.agents)
	case o.certFile == "" || o.keyFile == "":
		return cliutil.Usagef("--tls-cert-file and --tls-private-key-file are required: kube-apiserver reaches the API over TLS only")
	case o.interval <= 0:
		return cliutil.Usagef("--scrape-interval: must be positive, got %v", o.interval)
	case o.maxAge < 0:
		return cliutil.Usagef("--max-age: must not be negative, got %v", o.maxAge)
	}
	if o.maxAge == 0 {
		o.maxAge = 3 * o.interval
	}
	rc, err := o.cluster.RESTConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	store := custommetrics.NewStore()
	srv, err := custommetrics.NewServer(custommetrics.ServerConfig{Client: client, Store: store, MaxAge: o.maxAge, Window: o.interval})
	if err != nil {
		return err
	}
	if err := srv.Check(ctx); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err)
	}
	agentTLS := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.agentsServerNm}
	if o.agentsCAFile != "" {
		pem, err := os.ReadFile(o.agentsCAFile)
		if err != nil {
			return fmt.Errorf("--agents-ca-file: %w", err)
		}
		agentTLS.RootCAs = x509.NewCertPool()
		if !agentTLS.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--agents-ca-file: %s holds no PEM certificate", o.agentsCAFile)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	sc, err := custommetrics.NewScraper(custommetrics.ScraperConfig{Client: client, Store: store, Namespace: ns, Service: name,
		Port: o.agentsPort, Scheme: o.agentsScheme, Interval: o.interval, Logger: log,
		HTTP: &http.Client{Timeout: o.interval, Transport: &http.Transport{TLSClientConfig: agentTLS}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.address)
	if err != nil {
		return fmt.Errorf("--secure-address: %w", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}}
	go sc.Run(ctx)
	errc := make(chan error, 1)
	go func() { errc <- hs.ServeTLS(ln, "", "") }()
	log.Info("serving the custom metrics API", "address", ln.Addr().String(), "agents", o.agents)
	select {
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		return hs.Shutdown(sctx) //nolint:contextcheck // the command's context has ended; shutdown gets its own deadline
	case err := <-errc:
		return fmt.Errorf("serving the custom metrics API: %w", err)
	}
}
