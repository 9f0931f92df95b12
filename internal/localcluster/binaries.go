package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
)

// Names of the component binaries, as `make controlplane-bins` builds them and
// as controller-runtime's envtest looks for them in KUBEBUILDER_ASSETS.
const (
	BinEtcd              = "etcd"
	BinKubeAPIServer     = "kube-apiserver"
	BinControllerManager = "kube-controller-manager"
	BinScheduler         = "kube-scheduler"
	BinKwok              = "kwok"
	BinKubectl           = "kubectl"
)

// BinDirEnv names the environment variable that points the launcher at a
// directory of control-plane binaries instead of the repository's bin/.
const BinDirEnv = "GPUPLANE_CONTROLPLANE_BIN"

// productModule is the module path whose root holds bin/.
const productModule = "github.com/gpuplane/gpuplane"

// kwokStagesDir is the directory, beside the kwok binary, holding the stages
// copied from kwok's module by the build.
const kwokStagesDir = "kwok-stages"

// ErrBinaryMissing is returned (wrapped) when a component's binary is absent.
var ErrBinaryMissing = errors.New("control-plane binary missing")

// ResolveBinDir returns the directory holding the control-plane binaries:
// explicit if not empty, else $GPUPLANE_CONTROLPLANE_BIN, else the bin/
// directory at the root of the gpuplane checkout that contains the working
// directory (tests run inside the checkout).
func ResolveBinDir(explicit string) (string, error) {
	if explicit != "" {
		return filepath.Abs(explicit)
	}
	if env := os.Getenv(BinDirEnv); env != "" {
		return filepath.Abs(env)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("locating the control-plane binaries: %w", err)
	}
	root, err := findModuleRoot(wd)
	if err != nil {
		return "", fmt.Errorf("locating the control-plane binaries: %w; set %s to the directory `make controlplane-bins` built", err, BinDirEnv)
	}
	return filepath.Join(root, "bin"), nil
}

// findModuleRoot walks up from dir to the directory whose go.mod declares the
// product module.
func findModuleRoot(dir string) (string, error) {
	for d := dir; ; {
		if mod, err := modulePath(filepath.Join(d, "go.mod")); err == nil && mod == productModule {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of %s above %s", productModule, dir)
		}
		d = parent
	}
}

func modulePath(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s declares no module", goMod)
}

// requireBinaries checks that every named binary is an executable file in
// dir and returns their paths by name.
func requireBinaries(dir string, names ...string) (map[string]string, error) {
	paths := make(map[string]string, len(names))
	var missing []string
	for _, name := range names {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
			continue
		}
		paths[name] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s not found in %s: run `make controlplane-bins` to build them (or set %s to a directory that holds them)",
			ErrBinaryMissing, strings.Join(missing, ", "), dir, BinDirEnv)
	}
	return paths, nil
}

// VerifyBinaries resolves cfg's binary directory and checks that it (and
// cfg.KubeBinDir for the Kubernetes components) holds every binary cfg
// needs, returning the directory.
func VerifyBinaries(cfg Config) (string, error) {
	dir, err := ResolveBinDir(cfg.BinDir)
	if err != nil {
		return "", err
	}
	if _, err := cfg.resolveBinaries(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// resolveBinaries returns the paths of the binaries cfg needs by name:
// the Kubernetes components from KubeBinDir when it is set, the others
// from dir.
func (c Config) resolveBinaries(dir string) (map[string]string, error) {
	var own, kube []string
	for _, name := range c.binaries() {
		if c.KubeBinDir != "" && kubeComponent(name) {
			kube = append(kube, name)
		} else {
			own = append(own, name)
		}
	}
	paths, err := requireBinaries(dir, own...)
	if err != nil {
		return nil, err
	}
	if len(kube) > 0 {
		kdir, err := filepath.Abs(c.KubeBinDir)
		if err != nil {
			return nil, fmt.Errorf("localcluster config: KubeBinDir: %w", err)
		}
		kpaths, err := requireBinaries(kdir, kube...)
		if err != nil {
			return nil, fmt.Errorf("%w (KubeBinDir: `make compat-bins-<minor>` builds bin/k8s-<minor>)", err)
		}
		maps.Copy(paths, kpaths)
	}
	return paths, nil
}
