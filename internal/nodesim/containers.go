package nodesim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// ContainerConfig makes the simulator run, as processes on this machine,
// the containers of the pods bound to its node whose image it has a binary
// for: gpuplane's own images, so that the pods of gpuplane's Helm chart run
// as the chart writes them. It stands in for a container runtime as far as
// those pods need one:
//
//   - the command is the image's entrypoint (/usr/bin/<image name>) or the
//     container's command, resolved to the binary; args and env as the pod
//     spec sets them ($(VAR) expanded, fieldRef, configMapKeyRef and
//     secretKeyRef resolved);
//   - volumes: hostPath directories map into the node's directory (the
//     kubelet's device-plugin and pod-resources directories onto the
//     simulator's own, /proc onto /proc, any other below Dir/host);
//     configMap, secret and emptyDir volumes are directories of the pod's
//     own, kept in step with their objects; any other kind of volume fails
//     the pod with a reason. Paths in args and env that lie under a mount
//     are rewritten to where the mount's directory is, since the processes
//     share this machine's file system;
//   - network: each pod gets a loopback address of its own as its pod IP;
//     a listen address with no host in an arg (":9400") is bound to it;
//   - the ServiceAccount: a token bound to the pod (TokenRequest), renewed,
//     in a kubeconfig named by $KUBECONFIG;
//   - probes: HTTP readiness and liveness probes run as the kubelet runs
//     them, and set the container's Ready or restart it; an exited
//     container is restarted with back-off (restartPolicy Always).
//
// Pods whose images it has no binary for are simulated as before.
type ContainerConfig struct {
	// Binaries maps an image's name (the last element of its repository,
	// such as gpuplane-agent) to the executable that stands for it.
	Binaries map[string]string
	// Env is added to every run container's environment, after the pod's
	// own: what the node's hardware hands a container (GPUPLANE_SIMULATE).
	Env []string
	// APIServer is the API server's URL and CAData its CA, for the pods'
	// service-account kubeconfigs.
	APIServer string
	CAData    []byte
}

// volumeSyncEvery is how often configMap and secret volumes and service
// account tokens are refreshed.
const volumeSyncEvery = 10 * time.Second

// containerRestartMaxDelay caps the back-off between restarts.
const containerRestartMaxDelay = 30 * time.Second

// runnable reports whether the pod's containers all have a binary.
func (c *ContainerConfig) runnable(pod *corev1.Pod) bool {
	if c == nil || len(pod.Spec.Containers) == 0 {
		return false
	}
	for _, ctr := range pod.Spec.Containers {
		if _, ok := c.Binaries[imageName(ctr.Image)]; !ok {
			return false
		}
	}
	return true
}

// imageName is the last element of an image reference's repository:
// ghcr.io/gpuplane/gpuplane-agent:v0.1.0 -> gpuplane-agent.
func imageName(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	last := path.Base(ref)
	if i := strings.IndexByte(last, ':'); i >= 0 {
		last = last[:i]
	}
	return last
}

// runPod is a pod whose containers run as processes.
type runPod struct {
	s      *Simulator
	key    string
	pod    *corev1.Pod
	dir    string
	ip     string
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu         sync.Mutex
	containers []*runContainer
}

// runContainer is one container's process and state.
type runContainer struct {
	spec     corev1.Container
	binary   string
	args     []string
	env      []string
	child    *localcluster.Child
	started  time.Time
	ready    bool
	restarts int32
	last     *corev1.ContainerStateTerminated
	waiting  string // reason while not running
}

// podFailure is a pod the node cannot run as written.
type podFailure struct{ reason, message string }

func (e *podFailure) Error() string { return e.reason + ": " + e.message }

// startRunPod prepares the pod's volumes, token and containers and starts
// them.
func (s *Simulator) startRunPod(ctx context.Context, key string, pod *corev1.Pod) (*runPod, error) {
	r := &runPod{s: s, key: key, pod: pod.DeepCopy(), dir: filepath.Join(s.cfg.Dir, "pods", string(pod.UID)), ip: s.loopbackIP()}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	kubeconfig, err := r.writeToken(ctx)
	if err != nil {
		return nil, err
	}
	mounts, err := r.prepareVolumes(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range pod.Spec.Containers {
		rc, err := r.container(ctx, c, mounts, kubeconfig)
		if err != nil {
			return nil, err
		}
		r.containers = append(r.containers, rc)
	}
	runCtx, cancel := context.WithCancel(s.ctx)
	r.cancel = cancel
	for _, rc := range r.containers {
		if err := r.start(rc); err != nil {
			cancel()
			r.stopAll(ctx)
			return nil, err
		}
	}
	for _, rc := range r.containers {
		r.done.Go(func() { r.supervise(runCtx, rc) })
	}
	r.done.Go(func() { r.syncVolumes(runCtx, mounts, kubeconfig != "") })
	return r, nil
}

// loopbackIP hands out a loopback address per pod: 127.<node>.x.y.
func (s *Simulator) loopbackIP() string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s.cfg.NodeName))
	s.mu.Lock()
	s.nextIP++
	n := s.nextIP
	s.mu.Unlock()
	return fmt.Sprintf("127.%d.%d.%d", 64+h.Sum32()%128, (n/254)%256, n%254+1)
}

// mount is where a volume's directory is on this machine.
type mount struct {
	containerPath string
	hostPath      string
	volume        string
}

// hostPathFor maps a hostPath volume's path on the node.
func (s *Simulator) hostPathFor(p string) string {
	p = filepath.Clean(p)
	switch p {
	case "/var/lib/kubelet/device-plugins":
		return s.cfg.Dir
	case "/var/lib/kubelet/pod-resources":
		return filepath.Join(s.cfg.Dir, "pod-resources")
	case "/var/lib/kubelet/plugins_registry":
		return filepath.Join(s.cfg.Dir, "plugins_registry")
	case "/var/lib/kubelet/plugins":
		return filepath.Join(s.cfg.Dir, "plugins")
	case "/var/lib/kubelet/plugins/gpu.gpuplane.io":
		return filepath.Join(s.cfg.Dir, "plugins", "gpu.gpuplane.io")
	case "/var/run/cdi", "/run/cdi":
		return filepath.Join(s.cfg.Dir, "cdi")
	case "/proc":
		return "/proc"
	}
	return filepath.Join(s.cfg.Dir, "host", p)
}

// prepareVolumes makes each volume's directory and returns every
// container's mounts.
func (r *runPod) prepareVolumes(ctx context.Context) (map[string][]mount, error) {
	vols := map[string]string{}
	for _, v := range r.pod.Spec.Volumes {
		switch {
		case v.HostPath != nil:
			p := r.s.hostPathFor(v.HostPath.Path)
			typ := ptr.Deref(v.HostPath.Type, corev1.HostPathUnset)
			switch typ {
			case corev1.HostPathDirectoryOrCreate:
				if err := os.MkdirAll(p, 0o755); err != nil {
					return nil, err
				}
			case corev1.HostPathDirectory:
				if st, err := os.Stat(p); err != nil || !st.IsDir() {
					return nil, &podFailure{"HostPathMissing", fmt.Sprintf("volume %s: hostPath %s (type Directory) does not exist on the node", v.Name, v.HostPath.Path)}
				}
			case corev1.HostPathUnset:
			default:
				return nil, &podFailure{"UnsupportedVolume", fmt.Sprintf("volume %s: hostPath type %s is not simulated", v.Name, typ)}
			}
			vols[v.Name] = p
		case v.ConfigMap != nil, v.Secret != nil, v.EmptyDir != nil, v.Projected != nil:
			p := filepath.Join(r.dir, "volumes", v.Name)
			if err := os.MkdirAll(p, 0o755); err != nil {
				return nil, err
			}
			vols[v.Name] = p
			if v.EmptyDir == nil {
				if err := r.writeVolume(ctx, v, p); err != nil {
					return nil, err
				}
			}
		default:
			return nil, &podFailure{"UnsupportedVolume", fmt.Sprintf("volume %s: only hostPath, configMap, secret, projected and emptyDir volumes are simulated", v.Name)}
		}
	}
	out := map[string][]mount{}
	for _, c := range r.pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			p, ok := vols[m.Name]
			if !ok {
				return nil, &podFailure{"UnknownVolume", fmt.Sprintf("container %s mounts volume %s, which the pod does not have", c.Name, m.Name)}
			}
			if m.SubPath != "" {
				p = filepath.Join(p, m.SubPath)
			}
			out[c.Name] = append(out[c.Name], mount{containerPath: filepath.Clean(m.MountPath), hostPath: p, volume: m.Name})
		}
		// Longest first, so a nested mount wins over its parent.
		slices.SortFunc(out[c.Name], func(a, b mount) int { return len(b.containerPath) - len(a.containerPath) })
	}
	return out, nil
}

// maxVolumeBytes bounds what a configMap or secret volume may hold.
const maxVolumeBytes = 4 << 20

// writeVolume writes a configMap's or secret's keys as files, replacing
// each atomically, and removes files of keys that are gone.
func (r *runPod) writeVolume(ctx context.Context, v corev1.Volume, dir string) error {
	data := map[string][]byte{}
	optional := false
	switch {
	case v.ConfigMap != nil:
		optional = ptr.Deref(v.ConfigMap.Optional, false)
		cm, err := r.s.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			if optional {
				return nil
			}
			return &podFailure{"VolumeNotReady", fmt.Sprintf("volume %s: configMap %s: %v", v.Name, v.ConfigMap.Name, err)}
		}
		for k, val := range cm.Data {
			data[k] = []byte(val)
		}
		for k, val := range cm.BinaryData {
			data[k] = val
		}
	case v.Projected != nil:
		var err error
		if data, err = r.projected(ctx, v); err != nil {
			return err
		}
	case v.Secret != nil:
		optional = ptr.Deref(v.Secret.Optional, false)
		sec, err := r.s.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			if optional {
				return nil
			}
			return &podFailure{"VolumeNotReady", fmt.Sprintf("volume %s: secret %s: %v", v.Name, v.Secret.SecretName, err)}
		}
		data = sec.Data
	}
	total := 0
	for k, val := range data {
		total += len(val)
		if total > maxVolumeBytes {
			return &podFailure{"VolumeTooLarge", fmt.Sprintf("volume %s holds more than %d bytes", v.Name, maxVolumeBytes)}
		}
		if k != filepath.Base(k) || strings.HasPrefix(k, ".") {
			return &podFailure{"InvalidVolume", fmt.Sprintf("volume %s: key %q is not a file name", v.Name, k)}
		}
		target := filepath.Join(dir, k)
		if old, err := os.ReadFile(target); err == nil && string(old) == string(val) {
			continue
		}
		tmp := filepath.Join(dir, ".tmp-"+k)
		if err := os.WriteFile(tmp, val, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, target); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, ok := data[e.Name()]; !ok && !strings.HasPrefix(e.Name(), ".") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// projected gathers a projected volume's files: the pod's token, keys of
// configMaps and secrets, and downward-API fields (what the API server's
// kube-api-access volume holds).
func (r *runPod) projected(ctx context.Context, v corev1.Volume) (map[string][]byte, error) {
	out := map[string][]byte{}
	fail := func(format string, a ...any) (map[string][]byte, error) {
		return nil, &podFailure{"VolumeNotReady", fmt.Sprintf("volume %s: ", v.Name) + fmt.Sprintf(format, a...)}
	}
	for _, src := range v.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			tok, err := os.ReadFile(filepath.Join(r.dir, "token"))
			if err != nil {
				return fail("the pod mounts no service account token (automountServiceAccountToken: false)")
			}
			out[src.ServiceAccountToken.Path] = tok
		case src.ConfigMap != nil:
			cm, err := r.s.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if ptr.Deref(src.ConfigMap.Optional, false) {
					continue
				}
				return fail("configMap %s: %v", src.ConfigMap.Name, err)
			}
			if len(src.ConfigMap.Items) == 0 {
				for k, val := range cm.Data {
					out[k] = []byte(val)
				}
			}
			for _, it := range src.ConfigMap.Items {
				out[it.Path] = []byte(cm.Data[it.Key])
			}
		case src.Secret != nil:
			sec, err := r.s.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, src.Secret.Name, metav1.GetOptions{})
			if err != nil {
				if ptr.Deref(src.Secret.Optional, false) {
					continue
				}
				return fail("secret %s: %v", src.Secret.Name, err)
			}
			if len(src.Secret.Items) == 0 {
				maps.Copy(out, sec.Data)
			}
			for _, it := range src.Secret.Items {
				out[it.Path] = sec.Data[it.Key]
			}
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef == nil {
					return fail("downwardAPI item %s: only fieldRef is simulated", it.Path)
				}
				val, err := r.envFrom(ctx, "-", it.Path, &corev1.EnvVarSource{FieldRef: it.FieldRef})
				if err != nil {
					return nil, err
				}
				out[it.Path] = []byte(val)
			}
		default:
			return fail("only serviceAccountToken, configMap, secret and downwardAPI sources are simulated")
		}
	}
	return out, nil
}

// tokenLifetime is how long a pod's token is valid; it is renewed at half.
const tokenLifetime = time.Hour

// writeToken writes a token bound to the pod for its ServiceAccount and a
// kubeconfig that reads it; "" when the pod mounts no token.
func (r *runPod) writeToken(ctx context.Context) (string, error) {
	if !ptr.Deref(r.pod.Spec.AutomountServiceAccountToken, true) {
		return "", nil
	}
	if err := r.refreshToken(ctx); err != nil {
		return "", err
	}
	sa := r.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: r.s.cfg.Containers.APIServer, CertificateAuthorityData: r.s.cfg.Containers.CAData}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(r.dir, "token")}
	cfg.Contexts["pod"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: sa, Namespace: r.pod.Namespace}
	cfg.CurrentContext = "pod"
	path := filepath.Join(r.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

func (r *runPod) refreshToken(ctx context.Context) error {
	sa := r.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := r.s.client.CoreV1().ServiceAccounts(r.pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: r.pod.Name, UID: r.pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return &podFailure{"ServiceAccountTokenFailed", fmt.Sprintf("token for ServiceAccount %s/%s: %v", r.pod.Namespace, sa, err)}
	}
	tmp := filepath.Join(r.dir, ".token")
	if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(r.dir, "token"))
}

// syncVolumes keeps configMap and secret volumes and the token current.
func (r *runPod) syncVolumes(ctx context.Context, _ map[string][]mount, token bool) {
	lastToken := time.Now()
	t := time.NewTicker(volumeSyncEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, v := range r.pod.Spec.Volumes {
			if v.ConfigMap == nil && v.Secret == nil && v.Projected == nil {
				continue
			}
			if err := r.writeVolume(ctx, v, filepath.Join(r.dir, "volumes", v.Name)); err != nil && ctx.Err() == nil {
				r.s.log.Warn("refreshing a volume", "pod", r.key, "volume", v.Name, "err", err)
			}
		}
		if token && time.Since(lastToken) > tokenLifetime/2 {
			if err := r.refreshToken(ctx); err != nil && ctx.Err() == nil {
				r.s.log.Warn("renewing the pod's token", "pod", r.key, "err", err)
				continue
			}
			lastToken = time.Now()
		}
	}
}

// listenOnly matches an arg's value that is a listen address without a
// host: ":9400", "0.0.0.0:9400", "[::]:9400".
var listenOnly = regexp.MustCompile(`^(0\.0\.0\.0|\[::\])?:([0-9]{1,5})$`)

// container resolves one container's binary, args and env.
func (r *runPod) container(ctx context.Context, c corev1.Container, mounts map[string][]mount, kubeconfig string) (*runContainer, error) {
	env, err := r.env(ctx, c)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	name := imageName(c.Image)
	binary := r.s.cfg.Containers.Binaries[name]
	var args []string
	if len(c.Command) > 0 {
		cmd := expandVars(c.Command[0], vars)
		if path.Base(cmd) != name || (strings.Contains(cmd, "/") && cmd != "/usr/bin/"+name) {
			return nil, &podFailure{"RunContainerError", fmt.Sprintf("container %s: command %q is not in image %s (its entrypoint is /usr/bin/%s)", c.Name, cmd, c.Image, name)}
		}
		args = append(args, c.Command[1:]...)
	}
	args = append(args, c.Args...)
	for i, a := range args {
		args[i] = rewrite(expandVars(a, vars), mounts[c.Name], r.ip)
	}
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		env[i] = k + "=" + rewrite(v, mounts[c.Name], r.ip)
	}
	env = append(env, "PATH="+os.Getenv("PATH"), "HOSTNAME="+r.pod.Name)
	if kubeconfig != "" {
		env = append(env, clientcmd.RecommendedConfigPathEnvVar+"="+kubeconfig)
	}
	env = append(env, r.s.cfg.Containers.Env...)
	return &runContainer{spec: c, binary: binary, args: args, env: env}, nil
}

// env resolves the container's environment as the kubelet does.
func (r *runPod) env(ctx context.Context, c corev1.Container) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, &podFailure{"CreateContainerConfigError", fmt.Sprintf("container %s: envFrom is not simulated", c.Name)}
	}
	var out []string
	vars := map[string]string{}
	for _, e := range c.Env {
		v := expandVars(e.Value, vars)
		if src := e.ValueFrom; src != nil {
			var err error
			if v, err = r.envFrom(ctx, c.Name, e.Name, src); err != nil {
				return nil, err
			}
		}
		vars[e.Name] = v
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

func (r *runPod) envFrom(ctx context.Context, container, name string, src *corev1.EnvVarSource) (string, error) {
	fail := func(format string, a ...any) (string, error) {
		return "", &podFailure{"CreateContainerConfigError", fmt.Sprintf("container %s: env %s: ", container, name) + fmt.Sprintf(format, a...)}
	}
	switch {
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "spec.nodeName":
			return r.s.cfg.NodeName, nil
		case "metadata.name":
			return r.pod.Name, nil
		case "metadata.namespace":
			return r.pod.Namespace, nil
		case "metadata.uid":
			return string(r.pod.UID), nil
		case "spec.serviceAccountName":
			return r.pod.Spec.ServiceAccountName, nil
		case "status.podIP":
			return r.ip, nil
		case "status.hostIP":
			return r.s.nodeIP, nil
		}
		return fail("fieldRef %s is not simulated", src.FieldRef.FieldPath)
	case src.ConfigMapKeyRef != nil:
		cm, err := r.s.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := cm.Data[src.ConfigMapKeyRef.Key]; ok {
				return v, nil
			}
		}
		if ptr.Deref(src.ConfigMapKeyRef.Optional, false) {
			return "", nil
		}
		return fail("configMap %s key %s: not found (%v)", src.ConfigMapKeyRef.Name, src.ConfigMapKeyRef.Key, err)
	case src.SecretKeyRef != nil:
		sec, err := r.s.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := sec.Data[src.SecretKeyRef.Key]; ok {
				return string(v), nil
			}
		}
		if ptr.Deref(src.SecretKeyRef.Optional, false) {
			return "", nil
		}
		return fail("secret %s key %s: not found (%v)", src.SecretKeyRef.Name, src.SecretKeyRef.Key, err)
	}
	return fail("only fieldRef, configMapKeyRef and secretKeyRef are simulated")
}

// expandVars expands $(NAME) from vars as the kubelet does: an unknown
// name stays as written, $$ escapes a $.
func expandVars(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// rewrite maps an arg or env value onto this machine: a path under a
// mount to the mount's directory, a listen address without a host to the
// pod's IP. A flag's value (after "--flag=") is rewritten the same way.
func rewrite(arg string, mounts []mount, ip string) string {
	prefix, value := "", arg
	if strings.HasPrefix(arg, "-") {
		if i := strings.IndexByte(arg, '='); i >= 0 {
			prefix, value = arg[:i+1], arg[i+1:]
		}
	}
	if m := listenOnly.FindStringSubmatch(value); m != nil {
		return prefix + net.JoinHostPort(ip, m[2])
	}
	for _, m := range mounts {
		if value == m.containerPath || strings.HasPrefix(value, m.containerPath+"/") {
			return prefix + m.hostPath + strings.TrimPrefix(value, m.containerPath)
		}
	}
	return arg
}

// start runs the container's process.
func (r *runPod) start(rc *runContainer) error {
	logPath := filepath.Join(r.dir, rc.spec.Name+".log")
	child, err := localcluster.StartChildEnv(r.pod.Name+"/"+rc.spec.Name, rc.binary, rc.args, rc.env, logPath)
	if err != nil {
		return &podFailure{"RunContainerError", fmt.Sprintf("container %s: %v", rc.spec.Name, err)}
	}
	r.mu.Lock()
	rc.child, rc.started, rc.ready, rc.waiting = child, time.Now(), rc.spec.ReadinessProbe == nil, ""
	r.mu.Unlock()
	r.s.log.Info("container started", "pod", r.key, "container", rc.spec.Name, "pid", child.Pid(), "log", logPath, "args", strings.Join(rc.args, " "))
	return nil
}

// supervise probes the container, restarts it when it exits or fails its
// liveness probe, and writes its state to the pod's status.
func (r *runPod) supervise(ctx context.Context, rc *runContainer) {
	delay := time.Second
	r.writeStatus(ctx)
	for ctx.Err() == nil {
		r.mu.Lock()
		child := rc.child
		r.mu.Unlock()
		reason := r.probeUntilExit(ctx, rc, child)
		if ctx.Err() != nil {
			return
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_ = child.Stop(stopCtx, 10*time.Second)
		cancel()
		exit := int32(0)
		var ee *exec.ExitError
		if err := child.ExitError(); errors.As(err, &ee) {
			exit = int32(ee.ExitCode())
		} else if err != nil {
			exit = 1
		}
		r.mu.Lock()
		rc.last = &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason, StartedAt: metav1.NewTime(rc.started), FinishedAt: metav1.Now()}
		rc.restarts++
		rc.ready = false
		rc.waiting = "CrashLoopBackOff"
		r.mu.Unlock()
		r.s.log.Warn("container exited; restarting it", "pod", r.key, "container", rc.spec.Name, "reason", reason, "exitCode", exit, "in", delay)
		r.writeStatus(ctx)
		if time.Since(rc.started) > 2*containerRestartMaxDelay {
			delay = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, containerRestartMaxDelay)
		if err := r.start(rc); err != nil {
			r.s.log.Error("restarting a container", "pod", r.key, "container", rc.spec.Name, "err", err)
			continue
		}
		r.writeStatus(ctx)
	}
}

// probeUntilExit runs the container's probes until it exits (reason
// "Error" or "Completed") or fails its liveness probe ("Unhealthy").
func (r *runPod) probeUntilExit(ctx context.Context, rc *runContainer, child *localcluster.Child) string {
	readiness := newProber(rc.spec.ReadinessProbe, rc.spec, r.ip, false)
	liveness := newProber(rc.spec.LivenessProbe, rc.spec, r.ip, true)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-child.Exited():
			if child.ExitError() == nil {
				return "Completed"
			}
			return "Error"
		case <-t.C:
		}
		if readiness != nil {
			if ready, changed := readiness.tick(ctx, rc.started); changed {
				r.mu.Lock()
				rc.ready = ready
				r.mu.Unlock()
				r.s.log.Info("container readiness changed", "pod", r.key, "container", rc.spec.Name, "ready", ready, "probe", readiness.last)
				r.writeStatus(ctx)
			}
		}
		if liveness != nil {
			if alive, changed := liveness.tick(ctx, rc.started); changed && !alive {
				r.s.log.Warn("container failed its liveness probe", "pod", r.key, "container", rc.spec.Name, "probe", liveness.last)
				return "Unhealthy"
			}
		}
	}
}

// prober runs one HTTP probe on its period and counts results against
// its thresholds.
type prober struct {
	probe              *corev1.Probe
	url                string
	client             *http.Client
	next               time.Time
	ok                 bool
	successes, failure int32
	last               string
}

// newProber returns nil when there is no HTTP probe; initial is the
// state before the first result (readiness: false, liveness: true).
func newProber(p *corev1.Probe, c corev1.Container, ip string, initial bool) *prober {
	if p == nil || p.HTTPGet == nil {
		return nil
	}
	port := p.HTTPGet.Port.IntValue()
	if p.HTTPGet.Port.Type == intstr.String {
		for _, cp := range c.Ports {
			if cp.Name == p.HTTPGet.Port.StrVal {
				port = int(cp.ContainerPort)
			}
		}
	}
	host := ip
	if p.HTTPGet.Host != "" {
		host = p.HTTPGet.Host
	}
	scheme := strings.ToLower(string(p.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	return &prober{
		probe: p, ok: initial,
		url: scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + p.HTTPGet.Path,
		// The kubelet does not verify a probe's certificate.
		client: &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, //nolint:gosec // as the kubelet's prober
	}
}

// tick probes when the period is due and returns the probe's state and
// whether it changed.
func (p *prober) tick(ctx context.Context, started time.Time) (ok, changed bool) {
	now := time.Now()
	if now.Before(started.Add(time.Duration(p.probe.InitialDelaySeconds)*time.Second)) || now.Before(p.next) {
		return p.ok, false
	}
	p.next = now.Add(time.Duration(max(p.probe.PeriodSeconds, 1)) * time.Second)
	passed := false
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = p.client.Do(req); err == nil {
			_ = resp.Body.Close()
			passed = resp.StatusCode >= 200 && resp.StatusCode < 400
			p.last = fmt.Sprintf("GET %s: %d", p.url, resp.StatusCode)
		}
	}
	if err != nil {
		p.last = fmt.Sprintf("GET %s: %v", p.url, err)
	}
	was := p.ok
	if passed {
		p.successes, p.failure = p.successes+1, 0
		if p.successes >= max(p.probe.SuccessThreshold, 1) {
			p.ok = true
		}
	} else {
		p.successes, p.failure = 0, p.failure+1
		if p.failure >= max(p.probe.FailureThreshold, 1) {
			p.ok = false
		}
	}
	return p.ok, p.ok != was
}

// writeStatus writes the containers' states and the pod's readiness.
func (r *runPod) writeStatus(ctx context.Context) {
	r.mu.Lock()
	now := metav1.Now()
	var statuses []corev1.ContainerStatus
	allReady := true
	for _, rc := range r.containers {
		cs := corev1.ContainerStatus{
			Name: rc.spec.Name, Image: rc.spec.Image, ImageID: rc.spec.Image, ContainerID: containerID(r.pod, rc.spec.Name),
			Ready: rc.ready, RestartCount: rc.restarts, Started: ptr.To(rc.waiting == ""),
		}
		if rc.waiting != "" {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: rc.waiting}
		} else {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(rc.started)}
		}
		if rc.last != nil {
			cs.LastTerminationState.Terminated = rc.last.DeepCopy()
		}
		allReady = allReady && rc.ready
		statuses = append(statuses, cs)
	}
	r.mu.Unlock()
	pod, err := r.s.podLister.Pods(r.pod.Namespace).Get(r.pod.Name)
	if err != nil || pod.UID != r.pod.UID {
		return
	}
	err = r.s.updateStatus(ctx, pod, func(st *corev1.PodStatus, p *corev1.Pod) {
		r.s.runningStatus(st, p)
		st.PodIP, st.PodIPs = r.ip, []corev1.PodIP{{IP: r.ip}}
		st.ContainerStatuses = statuses
		status := corev1.ConditionFalse
		if allReady {
			status = corev1.ConditionTrue
		}
		for i := range st.Conditions {
			c := &st.Conditions[i]
			if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && c.Status != status {
				c.Status, c.LastTransitionTime = status, now
				c.Reason = ""
				if status == corev1.ConditionFalse {
					c.Reason = "ContainersNotReady"
				}
			}
		}
	})
	if err != nil && ctx.Err() == nil {
		r.s.log.Warn("writing a run pod's status", "pod", r.key, "err", err)
	}
}

// stop ends the pod's containers (SIGTERM, then SIGKILL after the pod's
// grace period, at most 30 s) and removes its directory.
func (r *runPod) stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	r.stopAll(ctx)
	_ = os.RemoveAll(r.dir)
}

func (r *runPod) stopAll(ctx context.Context) {
	grace := time.Duration(min(ptr.Deref(r.pod.Spec.TerminationGracePeriodSeconds, 30), 30)) * time.Second
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rc := range r.containers {
		if rc.child == nil {
			continue
		}
		if err := rc.child.Stop(ctx, grace); err != nil {
			r.s.log.Warn("stopping a container", "pod", r.key, "container", rc.spec.Name, "err", err)
		}
	}
}
