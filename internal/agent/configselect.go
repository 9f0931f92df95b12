package agent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/gpunode"
)

// ConfigLabel is the Node label that picks one of the configs in
// --config-dir for the node.
const ConfigLabel = gpunode.ConfigLabel

// Fallbacks when a node has no ConfigLabel and no --config-default is set.
const (
	// FallbackNamed picks the config named "default".
	FallbackNamed = "named"
	// FallbackSingle picks the only config there is.
	FallbackSingle = "single"
)

// maxConfigs bounds the configs a directory may hold.
const maxConfigs = 256

// configCheckEvery is how often the chosen config's file is read again:
// the kubelet swaps a mounted ConfigMap's files within a minute or so of
// its change.
const configCheckEvery = 10 * time.Second

// configSelector picks the agent's config from a directory of configs,
// one file each (a ConfigMap mounted as a volume), by the node's
// ConfigLabel, else the default, else the fallbacks; and asks for a
// reload when the choice or the chosen file's content changes.
type configSelector struct {
	dir      string
	def      string
	fallback []string
	log      *slog.Logger

	mu    sync.Mutex
	label string // the node's ConfigLabel, "" when it has none
	last  string // name and content hash of the config last chosen
}

func newConfigSelector(dir, def, fallback string, log *slog.Logger) (*configSelector, error) {
	s := &configSelector{dir: dir, def: def, log: log}
	for f := range strings.SplitSeq(fallback, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case FallbackNamed, FallbackSingle:
			if !slices.Contains(s.fallback, f) {
				s.fallback = append(s.fallback, f)
			}
		default:
			return nil, fmt.Errorf("--config-fallback: %q is not a fallback; want a comma-separated list of %s and %s", f, FallbackNamed, FallbackSingle)
		}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--config-dir: %s is not a directory (mount the configs' ConfigMap there)", dir)
	}
	return s, nil
}

// names lists the configs: the regular files of the directory (following
// the symlinks of a mounted ConfigMap), without the hidden ones the
// kubelet keeps its versions in.
func (s *configSelector) names() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("reading --config-dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		st, err := os.Stat(filepath.Join(s.dir, e.Name()))
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if len(out) == maxConfigs {
			return nil, fmt.Errorf("--config-dir %s holds more than %d configs", s.dir, maxConfigs)
		}
		out = append(out, e.Name())
	}
	return out, nil
}

// choose returns the name of the config for a node labelled label ("" for
// none), and why.
func (s *configSelector) choose(label string) (name, why string, err error) {
	names, err := s.names()
	if err != nil {
		return "", "", err
	}
	list := strings.Join(names, ", ")
	if list == "" {
		list = "none"
	}
	if label != "" {
		if !slices.Contains(names, label) {
			return "", "", fmt.Errorf("the node's label %s=%s names no config in %s (configs: %s): fix the label or add the config to the ConfigMap (chart value config.map)", ConfigLabel, label, s.dir, list)
		}
		return label, "the node's " + ConfigLabel + " label", nil
	}
	if s.def != "" {
		if !slices.Contains(names, s.def) {
			return "", "", fmt.Errorf("--config-default %s: no such config in %s (configs: %s)", s.def, s.dir, list)
		}
		return s.def, "--config-default", nil
	}
	for _, f := range s.fallback {
		switch {
		case f == FallbackNamed && slices.Contains(names, "default"):
			return "default", "the config named default", nil
		case f == FallbackSingle && len(names) == 1:
			return names[0], "the only config", nil
		}
	}
	return "", "", fmt.Errorf("no config for this node: it has no %s label, --config-default is empty and the fallbacks (%s) pick none of the configs in %s (%s): label the node or set the default (chart value config.default)",
		ConfigLabel, strings.Join(s.fallback, ", "), s.dir, list)
}

// Select returns the path of the config file the node uses now.
func (s *configSelector) Select() (string, error) {
	s.mu.Lock()
	label := s.label
	s.mu.Unlock()
	name, why, err := s.choose(label)
	if err != nil {
		return "", err
	}
	s.log.Debug("config chosen", "config", name, "by", why)
	return filepath.Join(s.dir, name), nil
}

// fingerprint names the chosen config and hashes its content, or says why
// none is chosen.
func (s *configSelector) fingerprint() string {
	path, err := s.Select()
	if err != nil {
		return "error: " + err.Error()
	}
	f, err := os.Open(path)
	if err != nil {
		return "error: " + err.Error()
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, configv1.MaxBytes+1)); err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%s %x", path, h.Sum(nil))
}

// setLabel records the node's ConfigLabel.
func (s *configSelector) setLabel(v string) {
	s.mu.Lock()
	changed := s.label != v
	s.label = v
	s.mu.Unlock()
	if changed {
		s.log.Info("the node's config label changed", "label", ConfigLabel, "value", v)
	}
}

// check asks for a reload when the choice or the chosen file changed
// since the last check.
func (s *configSelector) check(reload chan<- struct{}) {
	fp := s.fingerprint()
	s.mu.Lock()
	changed := s.last != "" && fp != s.last
	s.last = fp
	s.mu.Unlock()
	if !changed {
		return
	}
	if strings.HasPrefix(fp, "error: ") {
		s.log.Error("the node's config cannot be chosen; keeping the last good config", "err", strings.TrimPrefix(fp, "error: "))
		return
	}
	s.log.Info("the node's config changed: reloading", "config", strings.Fields(fp)[0])
	select {
	case reload <- struct{}{}:
	default:
	}
}

// readLabel reads the node's ConfigLabel once, so the first config is the
// node's own; without the API (nil cfg) the node counts as unlabelled.
func (s *configSelector) readLabel(ctx context.Context, cfg *rest.Config, node string) error {
	if cfg == nil {
		return nil
	}
	c, err := newNodeClient(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n := &corev1.Node{}
	if err := c.rest.Get().Resource("nodes").Name(node).Do(ctx).Into(n); err != nil {
		return fmt.Errorf("reading node %s for its %s label (RBAC: get nodes): %w", node, ConfigLabel, err)
	}
	s.setLabel(n.Labels[ConfigLabel])
	return nil
}

// run checks the chosen config every configCheckEvery and on every
// change of the node's label (watched when cfg is not nil) until ctx
// ends.
func (s *configSelector) run(ctx context.Context, cfg *rest.Config, node string, reload chan<- struct{}) error {
	s.check(reload)
	changed := make(chan struct{}, 1)
	if cfg != nil {
		c, err := newNodeClient(cfg)
		if err != nil {
			return err
		}
		watchNodeKeys(ctx, c, node, []string{ConfigLabel}, nil, func(n *corev1.Node) {
			s.setLabel(n.Labels[ConfigLabel])
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}
	t := time.NewTicker(configCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changed:
		}
		s.check(reload)
	}
}
