package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// portAttempts is how often a component is restarted on a fresh port when
// another process grabbed the one picked for it.
const portAttempts = 3

// pollInterval is how often readiness is probed.
const pollInterval = 50 * time.Millisecond

// ControlPlane is a running set of components. Stop it when done.
type ControlPlane struct {
	cfg     Config
	dir     string
	binDir  string
	log     *slog.Logger
	spawner *spawner
	ca      *certificateAuthority

	apiURL    string
	apiPort   int
	etcdURL   string
	admin     keyPair
	files     files
	probeHTTP *http.Client

	mu        sync.Mutex
	processes []*process // in start order
	stopped   bool
	stopErr   error
}

// Start launches the configured components, waits until each is ready and
// returns the running control plane. On error nothing is left running.
// ctx bounds start-up only; the processes run until Stop.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	binDir, err := ResolveBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	bins, err := cfg.resolveBinaries(binDir)
	if err != nil {
		return nil, err
	}
	if cfg.APIServerPort != 0 {
		if err := checkPortFree(cfg.APIServerPort, "kube-apiserver"); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpuplane-controlplane-"); err != nil {
			return nil, fmt.Errorf("creating the control plane's directory: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the control plane's directory: %w", err)
	}
	cp := &ControlPlane{cfg: cfg, dir: dir, binDir: binDir, log: cfg.Logger, spawner: newSpawner()}
	if err := cp.start(ctx, bins); err != nil {
		if stopErr := cp.Stop(context.Background()); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, bins map[string]string) error {
	began := time.Now()
	if err := cp.prepareFiles(); err != nil {
		return err
	}

	// etcd, then kube-apiserver: everything else needs the API.
	etcdData := filepath.Join(cp.dir, "etcd")
	etcdPort, _, err := cp.launch(ctx, launchSpec{
		name:   BinEtcd,
		binary: bins[BinEtcd],
		args: func(port int) ([]string, error) {
			peer, err := freePort()
			if err != nil {
				return nil, err
			}
			// A retry after a port clash must not find a half-initialised
			// member directory.
			if err := os.RemoveAll(etcdData); err != nil {
				return nil, fmt.Errorf("clearing etcd's data directory: %w", err)
			}
			return etcdArgs(etcdData, port, peer), nil
		},
		ready: func(ctx context.Context, port int) bool {
			return cp.probe(ctx, "http://"+hostPort(port)+"/health")
		},
	})
	if err != nil {
		return err
	}
	cp.etcdURL = "http://" + hostPort(etcdPort)

	apiPort, _, err := cp.launch(ctx, launchSpec{
		name:      BinKubeAPIServer,
		binary:    bins[BinKubeAPIServer],
		fixedPort: cp.cfg.APIServerPort,
		args: func(port int) ([]string, error) {
			return apiServerArgs(cp.files, filepath.Join(cp.dir, "apiserver"), port, etcdPort, cp.cfg.ExtraAPIServerArgs), nil
		},
		ready: func(ctx context.Context, port int) bool {
			return cp.probe(ctx, "https://"+hostPort(port)+"/readyz")
		},
	})
	if err != nil {
		return err
	}
	cp.apiPort = apiPort
	cp.apiURL = "https://" + hostPort(apiPort)
	if err := cp.writeKubeconfigs(); err != nil {
		return err
	}

	// The rest start side by side.
	var specs []launchSpec
	if cp.cfg.ControllerManager {
		specs = append(specs, launchSpec{
			name:   BinControllerManager,
			binary: bins[BinControllerManager],
			args: func(port int) ([]string, error) {
				return controllerManagerArgs(cp.files, port, cp.cfg.ComponentQPS, cp.cfg.ComponentBurst), nil
			},
			ready: func(ctx context.Context, port int) bool {
				return cp.probe(ctx, "https://"+hostPort(port)+"/healthz")
			},
		})
	}
	if cp.cfg.Scheduler {
		specs = append(specs, launchSpec{
			name:   BinScheduler,
			binary: bins[BinScheduler],
			args: func(port int) ([]string, error) {
				return schedulerArgs(cp.files, port), nil
			},
			ready: func(ctx context.Context, port int) bool {
				return cp.probe(ctx, "https://"+hostPort(port)+"/healthz")
			},
		})
	}
	if cp.cfg.Kwok {
		specs = append(specs, launchSpec{
			name:   BinKwok,
			binary: bins[BinKwok],
			args: func(port int) ([]string, error) {
				return kwokArgs(cp.files, port), nil
			},
			ready: func(ctx context.Context, port int) bool {
				return cp.probe(ctx, "http://"+hostPort(port)+"/healthz")
			},
		})
	}
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Go(func() {
			_, _, errs[i] = cp.launch(ctx, spec)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	if cp.cfg.ControllerManager {
		// Pods are refused in a namespace without its default ServiceAccount;
		// the controller-manager creates it. Seeing it in "default" means the
		// cluster accepts pods.
		if err := cp.waitDefaultServiceAccount(ctx); err != nil {
			return err
		}
	}
	cp.log.Info("control plane ready", "apiserver", cp.apiURL, "dir", cp.dir, "elapsed", time.Since(began).Round(time.Millisecond))
	return nil
}

// launchSpec describes how to run and probe one component.
type launchSpec struct {
	name      string
	binary    string
	fixedPort int // 0 picks a free port per attempt
	args      func(port int) ([]string, error)
	ready     func(ctx context.Context, port int) bool
}

// launch starts one component and waits until it is ready, restarting it on
// a fresh port when its port was taken between choosing and binding it.
func (cp *ControlPlane) launch(ctx context.Context, spec launchSpec) (int, *process, error) {
	began := time.Now()
	for attempt := 1; ; attempt++ {
		port := spec.fixedPort
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return 0, nil, err
			}
		}
		args, err := spec.args(port)
		if err != nil {
			return 0, nil, fmt.Errorf("preparing %s: %w", spec.name, err)
		}
		logPath := filepath.Join(cp.dir, spec.name+".log")
		cp.log.Debug("starting component", "component", spec.name, "port", port, "attempt", attempt, "log", logPath)
		p, err := startProcess(cp.spawner, spec.name, spec.binary, args, cp.dir, logPath)
		if err != nil {
			return 0, nil, err
		}
		cp.track(p)
		err = cp.waitReady(ctx, p, func(ctx context.Context) bool { return spec.ready(ctx, port) })
		if err == nil {
			cp.log.Info("component ready", "component", spec.name, "port", port, "elapsed", time.Since(began).Round(time.Millisecond))
			return port, p, nil
		}
		ee, exited := asExitError(err)
		if !exited || !ee.addrInUse() || spec.fixedPort != 0 || attempt >= portAttempts {
			if exited && ee.addrInUse() {
				return 0, nil, fmt.Errorf("%w: %w", ErrPortInUse, err)
			}
			return 0, nil, err
		}
		cp.log.Info("component lost its port to another process; retrying on a new one", "component", spec.name, "port", port)
	}
}

// waitReady polls ready until it holds, the process exits, or ctx ends.
func (cp *ControlPlane) waitReady(ctx context.Context, p *process, ready func(context.Context) bool) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if p.hasExited() {
			return p.exitError()
		}
		if ready(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to become ready: %w; last lines of %s:\n%s",
				p.name, ctx.Err(), p.logPath, TailFile(p.logPath, logTailLines))
		case <-p.exited:
		case <-ticker.C:
		}
	}
}

// probe reports whether GET url answers 200.
func (cp *ControlPlane) probe(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := cp.probeHTTP.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (cp *ControlPlane) waitDefaultServiceAccount(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("creating a client for the control plane: %w", err)
	}
	kcm := cp.processNamed(BinControllerManager)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		switch {
		case err == nil:
			return nil
		case !apierrors.IsNotFound(err) && ctx.Err() == nil:
			cp.log.Debug("reading the default service account", "err", err)
		}
		if kcm != nil && kcm.hasExited() {
			return kcm.exitError()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for kube-controller-manager to create the default ServiceAccount: %w; last lines of %s:\n%s",
				ctx.Err(), cp.LogPath(BinControllerManager), TailFile(cp.LogPath(BinControllerManager), logTailLines))
		case <-ticker.C:
		}
	}
}

func (cp *ControlPlane) track(p *process) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.processes = append(cp.processes, p)
}

func (cp *ControlPlane) processNamed(name string) *process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i := len(cp.processes) - 1; i >= 0; i-- {
		if cp.processes[i].name == name {
			return cp.processes[i]
		}
	}
	return nil
}

// Stop terminates every component, clients first and etcd last, waits for
// each to exit (sending SIGKILL after Config.StopGrace, or at once when ctx
// ends), and removes the directory unless Config.KeepDir or
// Config.Dir was set. It is safe to call more than once.
func (cp *ControlPlane) Stop(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return cp.stopErr
	}
	cp.stopped = true
	var errs []error
	// Clients first, in parallel; then the API server; then etcd.
	var clients, servers []*process
	for _, p := range cp.processes {
		switch p.name {
		case BinKubeAPIServer, BinEtcd:
			servers = append(servers, p)
		default:
			clients = append(clients, p)
		}
	}
	errs = append(errs, stopAll(ctx, clients, cp.cfg.StopGrace)...)
	for i := len(servers) - 1; i >= 0; i-- {
		if err := servers[i].stop(ctx, cp.cfg.StopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	cp.spawner.close()
	if !cp.cfg.KeepDir && cp.cfg.Dir == "" {
		if err := os.RemoveAll(cp.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing the control plane's directory: %w", err))
		}
	}
	cp.stopErr = errors.Join(errs...)
	cp.log.Info("control plane stopped", "dir", cp.dir)
	return cp.stopErr
}

func stopAll(ctx context.Context, ps []*process, grace time.Duration) []error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.stop(ctx, grace) })
	}
	wg.Wait()
	return errs
}

// Check returns an error for every component that has exited on its own
// since it started (with the tail of its log), or nil when all are running.
func (cp *ControlPlane) Check() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var errs []error
	for _, p := range cp.processes {
		if p.hasExited() && !cp.stopped {
			errs = append(errs, p.exitError())
		}
	}
	return errors.Join(errs...)
}

// RESTConfig returns a new admin (system:masters) client configuration with
// generous rate limits.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return restConfigFor(cp.apiURL, cp.ca.certPEM, cp.admin)
}

// APIServerURL is kube-apiserver's https URL.
func (cp *ControlPlane) APIServerURL() string { return cp.apiURL }

// EtcdURL is etcd's client URL.
func (cp *ControlPlane) EtcdURL() string { return cp.etcdURL }

// Kubeconfig is the path of the admin kubeconfig (certificates inline).
func (cp *ControlPlane) Kubeconfig() string { return cp.files.adminKubeconfig }

// Dir is the directory holding data, certificates, kubeconfigs and logs.
func (cp *ControlPlane) Dir() string { return cp.dir }

// BinDir is the directory the binaries were run from; it also serves as
// KUBEBUILDER_ASSETS for controller-runtime's envtest.
func (cp *ControlPlane) BinDir() string { return cp.binDir }

// LogPath is the log file of the named component (a Bin* constant).
func (cp *ControlPlane) LogPath(component string) string {
	return filepath.Join(cp.dir, component+".log")
}

// CACertPEM is the PEM certificate of the cluster's CA, which signed the API
// server's serving certificate and every client certificate.
func (cp *ControlPlane) CACertPEM() []byte { return append([]byte(nil), cp.ca.certPEM...) }

// UserKubeconfig writes a kubeconfig for a client-certificate user with the
// given groups (no groups: a user with only the RBAC you grant it) into the
// control plane's directory and returns its path.
func (cp *ControlPlane) UserKubeconfig(user string, groups ...string) (string, error) {
	kp, err := cp.ca.issueClient(user, groups)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.dir, "kubeconfig-"+sanitizeFileName(user))
	if err := writeKubeconfig(path, cp.apiURL, cp.ca.certPEM, user, kp); err != nil {
		return "", err
	}
	return path, nil
}

// prepareFiles generates the CA, serving certificates, client identities and
// the service-account key, and writes them and kwok's configuration where the
// components read them.
func (cp *ControlPlane) prepareFiles() error {
	pki := filepath.Join(cp.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", pki, err)
	}
	ca, err := newCertificateAuthority("gpuplane-controlplane-ca")
	if err != nil {
		return err
	}
	cp.ca = ca
	f := &cp.files
	f.caCert = filepath.Join(pki, "ca.crt")
	f.caKey = filepath.Join(pki, "ca.key")
	if err := os.WriteFile(f.caCert, ca.certPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", f.caCert, err)
	}
	caKey, err := ca.keyPEM()
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.caKey, caKey, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", f.caKey, err)
	}

	loopbackIPs := []net.IP{net.ParseIP(loopback), net.ParseIP(serviceClusterIP)}
	api, err := ca.issueServing("kube-apiserver", []string{
		"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}, loopbackIPs)
	if err != nil {
		return err
	}
	if f.apiCert, f.apiKey, err = api.write(pki, "apiserver"); err != nil {
		return err
	}
	comp, err := ca.issueServing("gpuplane-controlplane-component", []string{"localhost"}, loopbackIPs[:1])
	if err != nil {
		return err
	}
	if f.componentCert, f.componentKey, err = comp.write(pki, "component"); err != nil {
		return err
	}
	fp, err := newCertificateAuthority("gpuplane-front-proxy-ca")
	if err != nil {
		return err
	}
	f.frontProxyCA = filepath.Join(pki, "front-proxy-ca.crt")
	if err := os.WriteFile(f.frontProxyCA, fp.certPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", f.frontProxyCA, err)
	}
	proxy, err := fp.issueClient(frontProxyClient, nil)
	if err != nil {
		return err
	}
	if f.proxyClientCert, f.proxyKey, err = proxy.write(pki, "front-proxy-client"); err != nil {
		return err
	}
	saPriv, saPub, err := newServiceAccountKey()
	if err != nil {
		return err
	}
	f.saKey, f.saPub = filepath.Join(pki, "sa.key"), filepath.Join(pki, "sa.pub")
	if err := os.WriteFile(f.saKey, saPriv, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", f.saKey, err)
	}
	if err := os.WriteFile(f.saPub, saPub, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", f.saPub, err)
	}
	if cp.admin, err = ca.issueClient("gpuplane-admin", []string{"system:masters"}); err != nil {
		return err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	adminTLS, err := tls.X509KeyPair(cp.admin.CertPEM, cp.admin.KeyPEM)
	if err != nil {
		return fmt.Errorf("loading the admin key pair: %w", err)
	}
	cp.probeHTTP = &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{adminTLS}, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
		Proxy:             nil,
	}}

	if cp.cfg.Kwok {
		f.kwokConfig = filepath.Join(cp.dir, "kwok.yaml")
		if err := writeKwokConfig(f.kwokConfig, filepath.Join(cp.binDir, kwokStagesDir), cp.cfg.KwokStages); err != nil {
			return err
		}
	}
	return nil
}

// writeKubeconfigs writes the admin kubeconfig and one per component, each a
// distinct identity the API server's RBAC recognises.
func (cp *ControlPlane) writeKubeconfigs() error {
	f := &cp.files
	identities := []struct {
		path   *string
		file   string
		user   string
		groups []string
		want   bool
	}{
		{&f.adminKubeconfig, "admin.kubeconfig", "gpuplane-admin", []string{"system:masters"}, true},
		// Bound by the bootstrap RBAC policy to their built-in roles.
		{&f.kcmKubeconfig, "kube-controller-manager.kubeconfig", "system:kube-controller-manager", nil, cp.cfg.ControllerManager},
		{&f.schedKubeconfg, "kube-scheduler.kubeconfig", "system:kube-scheduler", nil, cp.cfg.Scheduler},
		// kwok plays the kubelet of every fake node at once (status of any
		// node and pod, leases, deletions), more than the per-node kubelet
		// role allows, so it runs as an administrator.
		{&f.kwokKubeconfig, "kwok.kubeconfig", "kwok-controller", []string{"system:masters"}, cp.cfg.Kwok},
	}
	for _, id := range identities {
		if !id.want {
			continue
		}
		kp := cp.admin
		if id.user != "gpuplane-admin" {
			var err error
			if kp, err = cp.ca.issueClient(id.user, id.groups); err != nil {
				return err
			}
		}
		*id.path = filepath.Join(cp.dir, id.file)
		if err := writeKubeconfig(*id.path, cp.apiURL, cp.ca.certPEM, id.user, kp); err != nil {
			return err
		}
	}
	if cp.cfg.Scheduler {
		f.schedulerConfig = filepath.Join(cp.dir, "kube-scheduler.yaml")
		if err := writeSchedulerConfig(f.schedulerConfig, f.schedKubeconfg, cp.cfg.ComponentQPS, cp.cfg.ComponentBurst); err != nil {
			return err
		}
	}
	return nil
}

func sanitizeFileName(s string) string {
	out := []byte(s)
	for i, c := range out {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '.' && c != '_' {
			out[i] = '_'
		}
	}
	return string(out)
}
