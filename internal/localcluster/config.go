package localcluster

import (
	"fmt"
	"log/slog"
	"time"
)

// Kwok manages only the nodes that carry this annotation with this value;
// other nodes (the simulated GPU nodes that run the real agent) are left to
// whatever plays their kubelet.
const (
	KwokNodeAnnotation      = "kwok.x-k8s.io/node"
	KwokNodeAnnotationValue = "fake"
)

// DefaultKwokStages returns the kwok lifecycles the launcher loads unless told
// otherwise, relative to the kwok-stages directory beside the binaries: nodes
// become Ready at once and keep a lease; pods run as soon as they are bound,
// Job pods complete, and deleted pods go away.
func DefaultKwokStages() []string {
	return []string{
		"node/fast/node-initialize.yaml",
		"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
		"pod/fast/pod-ready.yaml",
		"pod/fast/pod-complete.yaml",
		"pod/fast/pod-delete.yaml",
	}
}

// Config says which components to run and where.
//
// The zero value runs etcd and kube-apiserver only (what envtest runs);
// DefaultConfig adds kube-controller-manager and kwok.
type Config struct {
	// BinDir holds the binaries; empty means ResolveBinDir("").
	BinDir string
	// KubeBinDir, when set, holds the Kubernetes components (kube-apiserver,
	// and kube-controller-manager and kube-scheduler when they run) of
	// another Kubernetes release than BinDir's, e.g. bin/k8s-1.34 for the
	// compatibility tier; etcd and kwok still come from BinDir.
	KubeBinDir string
	// Dir holds data, certificates, kubeconfigs and logs; empty means a new
	// temporary directory, removed by Stop.
	Dir string
	// KeepDir leaves Dir in place after Stop (to read the logs).
	KeepDir bool

	// APIServerPort is the kube-apiserver's secure port; 0 picks a free one.
	APIServerPort int

	// ControllerManager runs kube-controller-manager: namespaces get their
	// default ServiceAccount (without it every pod is refused), Jobs and
	// Deployments get pods, and tainted not-ready nodes are untainted.
	ControllerManager bool
	// Scheduler runs kube-scheduler.
	Scheduler bool
	// Kwok runs kwok for the nodes annotated KwokNodeAnnotation=fake.
	Kwok bool
	// KwokStages lists the kwok stage files to load, relative to the
	// kwok-stages directory in BinDir; empty means DefaultKwokStages().
	KwokStages []string

	// ComponentQPS and ComponentBurst are the client rate limits of
	// kube-controller-manager and kube-scheduler. Their own defaults (20-50
	// QPS) cap scheduling at about 50 pods/s, far below what benchmarks drive.
	ComponentQPS   float32
	ComponentBurst int32

	// ExtraAPIServerArgs are appended to kube-apiserver's flags (later flags
	// win), e.g. "--feature-gates=...".
	ExtraAPIServerArgs []string

	// StartTimeout bounds Start; 0 means 90s.
	StartTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM for each component
	// before it sends SIGKILL; 0 means 30s. kube-apiserver can take many
	// seconds to drain.
	StopGrace time.Duration

	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig runs etcd, kube-apiserver, kube-controller-manager and kwok,
// in a temporary directory, with binaries from the repository's bin/.
func DefaultConfig() Config {
	return Config{ControllerManager: true, Kwok: true}
}

// withDefaults returns c with every unset field given its default, or an
// error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.APIServerPort < 0 || c.APIServerPort > 65535 {
		return c, fmt.Errorf("localcluster config: APIServerPort: must be 0 (pick a free port) or 1-65535, got %d", c.APIServerPort)
	}
	if c.ComponentQPS < 0 || c.ComponentBurst < 0 {
		return c, fmt.Errorf("localcluster config: ComponentQPS/ComponentBurst: must not be negative, got %v/%d", c.ComponentQPS, c.ComponentBurst)
	}
	if len(c.KwokStages) == 0 {
		c.KwokStages = DefaultKwokStages()
	}
	if c.ComponentQPS == 0 {
		c.ComponentQPS = 500
	}
	if c.ComponentBurst == 0 {
		c.ComponentBurst = 1000
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 90 * time.Second
	}
	if c.StopGrace == 0 {
		c.StopGrace = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// kubeComponent reports whether a binary is a Kubernetes component,
// taken from KubeBinDir when that is set.
func kubeComponent(name string) bool {
	return name == BinKubeAPIServer || name == BinControllerManager || name == BinScheduler
}

// binaries lists the binaries c needs.
func (c Config) binaries() []string {
	names := []string{BinEtcd, BinKubeAPIServer}
	if c.ControllerManager {
		names = append(names, BinControllerManager)
	}
	if c.Scheduler {
		names = append(names, BinScheduler)
	}
	if c.Kwok {
		names = append(names, BinKwok)
	}
	return names
}
