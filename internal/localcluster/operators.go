package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The workload operators StartOperator runs, by the names `make
// operator-bins` builds them under (hack/build-operators.sh): each binary is
// <operators dir>/<name>, its CRDs <operators dir>/<name>-crds/.
const (
	// OperatorJobSet is the JobSet controller (sigs.k8s.io/jobset).
	OperatorJobSet = "jobset"
	// OperatorTraining is Kubeflow's training-operator v1 (PyTorchJob,
	// MPIJob, TFJob, XGBoostJob, PaddleJob, MXJob).
	OperatorTraining = "training-operator"
	// OperatorKubeRay is KubeRay's ray-operator (RayCluster, RayJob,
	// RayService).
	OperatorKubeRay = "kuberay"
	// OperatorLWS is the LeaderWorkerSet controller (sigs.k8s.io/lws).
	OperatorLWS = "lws"
	// OperatorKarpenter is Karpenter (sigs.k8s.io/karpenter) with its kwok
	// cloud provider: it buys kwok nodes for pods that wait for capacity.
	OperatorKarpenter = "karpenter"
)

// operatorsSubdir is the directory beside the control-plane binaries that
// holds the operators.
const operatorsSubdir = "operators"

// OperatorsDir returns the directory of the operators that `make
// operator-bins` builds beside the control-plane binaries in binDir.
func OperatorsDir(binDir string) string { return filepath.Join(binDir, operatorsSubdir) }

// Operators lists the names StartOperator knows, sorted.
func Operators() []string {
	names := make([]string, 0, len(operatorRecipes))
	for n := range operatorRecipes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ErrUnknownOperator is returned (wrapped) for a name StartOperator does
// not know.
var ErrUnknownOperator = errors.New("unknown workload operator")

// VerifyOperator checks that dir holds operator name's binary and CRDs.
func VerifyOperator(dir, name string) error {
	if _, ok := operatorRecipes[name]; !ok {
		return fmt.Errorf("%w %q (known: %s)", ErrUnknownOperator, name, strings.Join(Operators(), ", "))
	}
	if _, err := requireBinaries(dir, name); err != nil {
		return fmt.Errorf("operator %s: %s not found in %s: run `make operator-bins` to build it: %w", name, name, dir, ErrBinaryMissing)
	}
	crds, err := filepath.Glob(filepath.Join(dir, name+"-crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("operator %s: no CRDs in %s: run `make operator-bins` to build it: %w", name, filepath.Join(dir, name+"-crds"), ErrBinaryMissing)
	}
	return nil
}

// OperatorConfig says how StartOperator runs one workload operator.
type OperatorConfig struct {
	// Name is one of Operators().
	Name string
	// Dir holds the operators and their CRDs; default OperatorsDir of
	// ResolveBinDir("").
	Dir string
	// RESTConfig reaches the API server as a cluster admin, to install the
	// CRDs and what the operator expects from its installation.
	RESTConfig *rest.Config
	// Kubeconfig is the same identity as a file, for the operator.
	Kubeconfig string
	// WorkDir is the operator's own directory (its configuration,
	// certificates, temporary files and log); made when missing.
	WorkDir string
	// Args are appended to the operator's arguments (for instance
	// --enable-scheme=pytorchjob, to run only the training operator's
	// PyTorchJob controller).
	Args []string
	// ReadyTimeout bounds the wait for the operator's readiness; default 2
	// minutes.
	ReadyTimeout time.Duration
}

// Operator is a running workload operator.
type Operator struct {
	*Child
	name    string
	logPath string
	crds    []string
	// webhookPort and certDir are its webhook server's, when it serves
	// one gpuplane may register (JobSet's defaulting webhook).
	webhookPort int
	certDir     string
}

// Webhook returns the loopback port of the operator's webhook server and
// the directory of its certificate (tls.crt, tls.key, and ca.crt, the CA
// to trust it by), for a caller that registers its webhooks with the API
// server; port 0 when it serves none that can be.
func (o *Operator) Webhook() (port int, certDir string) { return o.webhookPort, o.certDir }

// Name is the operator's name.
func (o *Operator) Name() string { return o.name }

// LogPath is the file its output goes to.
func (o *Operator) LogPath() string { return o.logPath }

// CRDs are the CustomResourceDefinitions installed for it.
func (o *Operator) CRDs() []string { return slices.Clone(o.crds) }

// StartOperator installs operator cfg.Name's CRDs, creates what its own
// installation would have put in the cluster and on disk (a namespace, a
// Secret and webhook configuration it updates, a serving certificate),
// starts it as a Child with its probes on a free loopback port and its
// metrics off, and returns once its readiness endpoint answers: from then
// on it reconciles its workloads. Its webhooks are not registered with the
// API server, so it runs as it does behind them; workloads must set what
// its defaulting webhook would.
func StartOperator(ctx context.Context, cfg OperatorConfig) (*Operator, error) {
	recipe, ok := operatorRecipes[cfg.Name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownOperator, cfg.Name, strings.Join(Operators(), ", "))
	}
	if cfg.RESTConfig == nil || cfg.Kubeconfig == "" || cfg.WorkDir == "" {
		return nil, fmt.Errorf("starting operator %s: RESTConfig, Kubeconfig and WorkDir are required", cfg.Name)
	}
	if cfg.Dir == "" {
		bin, err := ResolveBinDir("")
		if err != nil {
			return nil, err
		}
		cfg.Dir = OperatorsDir(bin)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if err := VerifyOperator(cfg.Dir, cfg.Name); err != nil {
		return nil, err
	}
	workDir, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	cfg.WorkDir = workDir
	if err := os.MkdirAll(workDir, 0o750); err != nil {
		return nil, fmt.Errorf("starting operator %s: %w", cfg.Name, err)
	}
	dyn, err := dynamic.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("starting operator %s: %w", cfg.Name, err)
	}
	client, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("starting operator %s: %w", cfg.Name, err)
	}
	crds, err := InstallCRDs(ctx, dyn, filepath.Join(cfg.Dir, cfg.Name+"-crds"))
	if err != nil {
		return nil, fmt.Errorf("operator %s: %w", cfg.Name, err)
	}
	logPath := filepath.Join(workDir, cfg.Name+".log")
	return restartEarlyExits(ctx, cfg.Name, logPath, func() (*Operator, error) {
		return launchOperator(ctx, cfg, client, recipe, crds, logPath)
	})
}

// restartEarlyExits calls launch until it returns a ready operator, at most
// portAttempts times. An operator that exits before it is ready is started
// again, as the kubelet restarts a crashing container, with ports picked
// afresh: a port chosen free can be taken by another process before the
// operator binds it, and not every operator says so before it exits (the
// training operator's failing controller set-up exits first). Each failed
// attempt's log is kept beside logPath. Any other failure is returned at
// once.
func restartEarlyExits(ctx context.Context, name, logPath string, launch func() (*Operator, error)) (*Operator, error) {
	var failed []error
	for attempt := 1; ; attempt++ {
		op, err := launch()
		if err == nil {
			return op, nil
		}
		var early *operatorExitedError
		if !errors.As(err, &early) || attempt >= portAttempts || ctx.Err() != nil {
			return nil, errors.Join(append(failed, err)...)
		}
		kept := strings.TrimSuffix(logPath, ".log") + fmt.Sprintf(".attempt-%d.log", attempt)
		if rerr := os.Rename(logPath, kept); rerr != nil {
			return nil, errors.Join(append(failed, err, rerr)...)
		}
		failed = append(failed, fmt.Errorf("attempt %d of %d: operator %s exited before it was ready (its log is kept as %s)", attempt, portAttempts, name, kept))
	}
}

// launchOperator starts one attempt of an operator and waits for it to be
// ready, stopping it when it is not.
func launchOperator(ctx context.Context, cfg OperatorConfig, client kubernetes.Interface, recipe operatorRecipe, crds []string, logPath string) (*Operator, error) {
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	run := &operatorRun{cfg: cfg, client: client, probeAddr: hostPort(probePort)}
	args, env, err := recipe(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("preparing operator %s: %w", cfg.Name, err)
	}
	// The namespace variables some operators read to find their own
	// installation; none of them limits what they watch.
	env = append(append(os.Environ(), "KUBECONFIG="+cfg.Kubeconfig, "NAMESPACE=default", "POD_NAMESPACE=default"), env...)
	child, err := StartChildEnv(cfg.Name, filepath.Join(cfg.Dir, cfg.Name), append(args, cfg.Args...), env, logPath)
	if err != nil {
		return nil, err
	}
	op := &Operator{Child: child, name: cfg.Name, logPath: logPath, crds: crds, webhookPort: run.webhookPort, certDir: run.certDir}
	if err := waitOperatorReady(ctx, op, "http://"+run.probeAddr+"/readyz", cfg.ReadyTimeout); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return nil, errors.Join(err, op.Stop(stopCtx, 5*time.Second))
	}
	return op, nil
}

// operatorExitedError is an operator's exit before it was ready.
type operatorExitedError struct {
	name string
	err  error
}

func (e *operatorExitedError) Error() string {
	return fmt.Sprintf("operator %s exited before it was ready: %v", e.name, e.err)
}

func (e *operatorExitedError) Unwrap() error { return e.err }

// waitOperatorReady polls url until it answers 200, the operator exits or
// timeout passes.
func waitOperatorReady(ctx context.Context, op *Operator, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	// Not faster: the operators log every failed probe.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-op.Exited():
			return &operatorExitedError{name: op.name, err: op.ExitError()}
		case <-ctx.Done():
			return fmt.Errorf("operator %s not ready within %v (%s: %s); see %s", op.name, timeout, url, last, op.logPath)
		case <-tick.C:
		}
	}
}

// operatorRun is what a recipe prepares an operator with.
type operatorRun struct {
	cfg       OperatorConfig
	client    kubernetes.Interface
	probeAddr string
	// webhookPort and certDir: a recipe whose webhook server may be
	// registered with the API server sets them (Operator.Webhook).
	webhookPort int
	certDir     string
}

// servingCert writes a certificate for 127.0.0.1, signed by a CA of its
// own, as tls.crt and tls.key into dir, with the CA as ca.crt: the
// operators' webhook servers do not start without one, and a caller that
// registers a webhook trusts it by the CA.
func servingCert(dir string) error {
	ca, err := newCertificateAuthority("gpuplane-operator-webhook-ca")
	if err != nil {
		return err
	}
	kp, err := ca.issueServing(loopback, nil, []net.IP{net.ParseIP(loopback)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": ca.certPEM} {
		if err := writeFileAtomic(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic replaces path with data in one rename, so that another
// process reading it never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

// createIfMissing creates obj through create, an object that exists
// already being fine.
func createIfMissing[T any](ctx context.Context, what string, obj T, create func(context.Context, T, metav1.CreateOptions) (T, error)) error {
	if _, err := create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s: %w", what, err)
	}
	return nil
}

// An operatorRecipe prepares what operator run.cfg.Name needs and returns
// its arguments and extra environment.
type operatorRecipe func(ctx context.Context, run *operatorRun) (args, env []string, err error)

var operatorRecipes = map[string]operatorRecipe{
	OperatorJobSet:    jobSetRecipe,
	OperatorTraining:  trainingRecipe,
	OperatorKubeRay:   kubeRayRecipe,
	OperatorLWS:       controllerConfigRecipe("config.lws.x-k8s.io/v1alpha1", "lws.yaml"),
	OperatorKarpenter: karpenterRecipe,
}

// jobSetRecipe runs the JobSet controller.
var jobSetRecipe = controllerConfigRecipe("config.jobset.x-k8s.io/v1alpha1", "jobset.yaml")

// controllerConfigRecipe runs an operator that takes a configuration file
// of the given apiVersion (JobSet's and LeaderWorkerSet's share a shape):
// no leader election, its certificate management off and a serving
// certificate of ours instead, its webhook server on a loopback port that
// Operator.Webhook returns.
func controllerConfigRecipe(apiVersion, file string) operatorRecipe {
	return func(_ context.Context, run *operatorRun) ([]string, []string, error) {
		certDir := filepath.Join(run.cfg.WorkDir, "serving-certs")
		if err := servingCert(certDir); err != nil {
			return nil, nil, err
		}
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		cfg := fmt.Sprintf(`apiVersion: %s
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: %s
  port: %d
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: %s
`, apiVersion, loopback, port, certDir, run.probeAddr)
		path := filepath.Join(run.cfg.WorkDir, file)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			return nil, nil, err
		}
		run.webhookPort, run.certDir = port, certDir
		return []string{"--config", path, "--kubeconfig", run.cfg.Kubeconfig}, nil, nil
	}
}

// Names the training operator v1 looks for in its installation.
const (
	trainingNamespace = "kubeflow"
	trainingSecret    = "training-operator-webhook-cert"
	trainingWebhooks  = "validator.training-operator.kubeflow.org"
	// trainingMountCheck is the file whose existence the training
	// operator's certificate rotator waits for before it starts its
	// controllers (in a cluster, the kubelet mounts its Secret there). The
	// path is fixed in the operator; only the file's existence counts.
	trainingMountCheck = "/tmp/k8s-webhook-server/serving-certs/tls.crt"
)

// trainingRecipe runs Kubeflow's training operator v1. It manages its
// webhook certificate itself, into a Secret and a
// ValidatingWebhookConfiguration it expects to exist in its namespace; the
// configuration made here has no webhook, so the API server never calls
// it. Its webhook server reads its certificate from $TMPDIR's
// k8s-webhook-server/serving-certs, a directory of the operator's own here,
// where a certificate of ours is written before it starts; its rotator
// waits for a file at a fixed path under /tmp, made when missing. With
// both in place the controllers start at once.
func trainingRecipe(ctx context.Context, run *operatorRun) ([]string, []string, error) {
	c := run.client
	if err := createIfMissing(ctx, "namespace "+trainingNamespace, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: trainingNamespace}}, c.CoreV1().Namespaces().Create); err != nil {
		return nil, nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: trainingNamespace, Name: trainingSecret}}
	if err := createIfMissing(ctx, "Secret "+trainingSecret, secret, c.CoreV1().Secrets(trainingNamespace).Create); err != nil {
		return nil, nil, err
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: trainingWebhooks}}
	if err := createIfMissing(ctx, "ValidatingWebhookConfiguration "+trainingWebhooks, vwc, c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create); err != nil {
		return nil, nil, err
	}
	tmp := filepath.Join(run.cfg.WorkDir, "tmp")
	certDir := filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
	if err := servingCert(certDir); err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(trainingMountCheck); err != nil {
		if err := os.MkdirAll(filepath.Dir(trainingMountCheck), 0o755); err != nil {
			return nil, nil, fmt.Errorf("making the training operator's certificate directory: %w", err)
		}
		b, err := os.ReadFile(filepath.Join(certDir, "tls.crt"))
		if err != nil {
			return nil, nil, err
		}
		if err := writeFileAtomic(trainingMountCheck, b); err != nil {
			return nil, nil, fmt.Errorf("writing %s, which the training operator waits for: %w", trainingMountCheck, err)
		}
	}
	webhookPort, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	args := []string{"--kubeconfig", run.cfg.Kubeconfig, "--metrics-bind-address=0",
		"--health-probe-bind-address=" + run.probeAddr, "--webhook-server-port=" + strconv.Itoa(webhookPort)}
	return args, []string{"TMPDIR=" + tmp}, nil
}

// kubeRayRecipe runs KubeRay's ray-operator: its webhooks are off unless
// asked for, so it needs nothing but its CRDs.
func kubeRayRecipe(_ context.Context, run *operatorRun) ([]string, []string, error) {
	return []string{"--kubeconfig", run.cfg.Kubeconfig, "--metrics-addr=0",
		"--health-probe-bind-address=" + run.probeAddr, "--enable-leader-election=false"}, nil, nil
}

// karpenterRecipe runs Karpenter with its kwok cloud provider, without
// leader election, its probes on the recipe's port and its metrics on a
// free one (it binds them on every interface). The caller passes the kwok
// provider's instance types (--instance-types-file-path) in Args; the
// nodes it makes carry the kwok.x-k8s.io/node annotation, so the control
// plane's kwok runs them.
func karpenterRecipe(_ context.Context, run *operatorRun) ([]string, []string, error) {
	_, probePort, err := net.SplitHostPort(run.probeAddr)
	if err != nil {
		return nil, nil, err
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	return []string{"--disable-leader-election", "--health-probe-port=" + probePort,
		"--metrics-port=" + strconv.Itoa(metricsPort)}, nil, nil
}
