package dev

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/nodeoffer"
)

// KarpenterSpec is Karpenter on the dev cluster (--karpenter-pools): the
// kwok provider's instance types and the objects that make its pools.
type KarpenterSpec struct {
	// InstanceTypes is the kwok provider's instance-types file.
	InstanceTypes string `json:"instanceTypes"`
	// Objects is a JSON array of the KWOKNodeClass and the NodePools.
	Objects string `json:"objects"`
	// Pools names the NodePools, for messages.
	Pools []string `json:"pools"`
}

// karpenterNodeClass names the dev cluster's KWOKNodeClass.
const karpenterNodeClass = "gpuplane-dev"

// Karpenter's resources the dev cluster creates.
var karpenterResources = map[string]schema.GroupVersionResource{
	nodeoffer.KindNodePool:  {Group: nodeoffer.KarpenterGroup, Version: "v1", Resource: "nodepools"},
	nodeoffer.KindKWOKClass: {Group: nodeoffer.KWOKGroup, Version: "v1alpha1", Resource: "kwoknodeclasses"},
}

// parsePool reads NAME=PROFILE[:MODE].
func parsePool(s string) (name, profile string, err error) {
	name, profile, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || name == "" || profile == "" {
		return "", "", cliutil.Usagef("--karpenter-pools %q: want INSTANCE-TYPE=PROFILE[:MODE], e.g. h100x8=dgxh100", s)
	}
	if _, _, _, err := parseNodeProfile(profile); err != nil {
		return "", "", cliutil.Usagef("--karpenter-pools %q: %w", s, err)
	}
	return name, profile, nil
}

// prepareKarpenter works out what a node of each pool of --karpenter-pools
// offers once its agent runs (the node's profile and agent config, as a
// simulated node of that profile gets them) and writes the kwok provider's
// instance types and the pools' objects into dir.
func prepareKarpenter(ctx context.Context, f *upFlags, dir string) (*KarpenterSpec, error) {
	var its []nodeoffer.InstanceType
	seen := map[string]bool{}
	for _, arg := range f.karpenterPools {
		name, profile, err := parsePool(arg)
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, cliutil.Usagef("--karpenter-pools: instance type %s given twice", name)
		}
		seen[name] = true
		n, err := prepareNode(ctx, name, profile, filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var cfg *configv1.Config
		if n.AgentConfig != "" {
			fh, err := os.Open(n.AgentConfig)
			if err != nil {
				return nil, err
			}
			cfg, err = configv1.Load(fh, configv1.Options{})
			_ = fh.Close()
			if err != nil {
				return nil, fmt.Errorf("--karpenter-pools %s: %w", arg, err)
			}
		}
		offer, err := nodeoffer.Compute(ctx, n.SimProfile, cfg)
		if err != nil {
			return nil, fmt.Errorf("--karpenter-pools %s: %w", arg, err)
		}
		its = append(its, nodeoffer.InstanceType{Name: name, Offer: offer, CPU: "224", Memory: "2Ti", Price: 98.32})
	}
	types, err := nodeoffer.KWOKInstanceTypes(its, "zone-a")
	if err != nil {
		return nil, cliutil.Usagef("--karpenter-pools: %w", err)
	}
	objs := []map[string]any{nodeoffer.KWOKNodeClass(karpenterNodeClass, 0).Object}
	spec := &KarpenterSpec{InstanceTypes: filepath.Join(dir, "instance-types.json"), Objects: filepath.Join(dir, "objects.json")}
	for _, it := range its {
		np, err := nodeoffer.NodePool(it, nodeoffer.PoolOptions{NodeClass: karpenterNodeClass, ConsolidateAfter: f.karpenterIdle})
		if err != nil {
			return nil, cliutil.Usagef("--karpenter-pools: %w", err)
		}
		objs = append(objs, np.Object)
		spec.Pools = append(spec.Pools, np.GetName())
	}
	b, err := json.MarshalIndent(objs, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	if err := os.WriteFile(spec.InstanceTypes, types, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(spec.Objects, b, 0o600); err != nil {
		return nil, err
	}
	return spec, nil
}

// startKarpenter runs Karpenter with the pools' instance types and creates
// their KWOKNodeClass and NodePools once its CRDs are in.
func (s *supervisor) startKarpenter(ctx context.Context, cp *localcluster.ControlPlane) error {
	k := s.spec.Karpenter
	started := time.Now()
	s.step("starting Karpenter (kwok provider) with node pools %s", strings.Join(k.Pools, ", "))
	op, err := localcluster.StartOperator(ctx, localcluster.OperatorConfig{
		Name: localcluster.OperatorKarpenter, Dir: s.spec.OperatorsDir,
		RESTConfig: clientConfig(cp.RESTConfig()), Kubeconfig: cp.Kubeconfig(),
		WorkDir: s.dir.path(filepath.Join("operators", localcluster.OperatorKarpenter)),
		Args:    []string{"--instance-types-file-path=" + k.InstanceTypes},
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.operators = append(s.operators, op)
	s.state.Pids[operatorComponent(op.Name())] = op.Pid()
	s.state.Logs[operatorComponent(op.Name())] = op.LogPath()
	s.mu.Unlock()
	if err := s.writeState(); err != nil {
		return err
	}
	b, err := os.ReadFile(k.Objects)
	if err != nil {
		return err
	}
	var objs []map[string]any
	if err := json.Unmarshal(b, &objs); err != nil {
		return fmt.Errorf("reading %s: %w", k.Objects, err)
	}
	dyn, err := dynamic.NewForConfig(clientConfig(cp.RESTConfig()))
	if err != nil {
		return err
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o}
		gvr, ok := karpenterResources[u.GetKind()]
		if !ok {
			return fmt.Errorf("%s: unexpected kind %q", k.Objects, u.GetKind())
		}
		if _, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	s.step("Karpenter ready (%.1fs); it buys nodes of %s for pods that wait for room", time.Since(started).Seconds(), strings.Join(k.Pools, ", "))
	return nil
}
