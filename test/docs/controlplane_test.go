package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/mig"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestYAMLFiles checks the YAML blocks that are not Kubernetes objects with
// the parser of what each says it is: Helm values render with the chart
// (its schema included) and every device-plugin config in them loads, an
// agent config, a mig-parted config and a simulated profile load.
func TestYAMLFiles(t *testing.T) {
	chart, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages(t) {
		for _, b := range p.blocks {
			kind, _ := b.mark("yaml")
			if b.lang != "yaml" {
				continue
			}
			switch kind {
			case "helm values":
				var values map[string]any
				if err := yaml.Unmarshal([]byte(b.text), &values); err != nil {
					t.Errorf("%s: %v", b, err)
					continue
				}
				if _, err := helmchart.Render(chart, values, "gpuplane", "gpuplane-system"); err != nil {
					t.Errorf("%s: the chart refuses these values: %v", b, err)
				}
				cfg, _ := values["config"].(map[string]any)
				m, _ := cfg["map"].(map[string]any)
				for name, v := range m {
					s, _ := v.(string)
					if _, err := configv1.Load(strings.NewReader(s), configv1.Options{}); err != nil {
						t.Errorf("%s: config.map.%s: %v", b, name, err)
					}
				}
			case "agent config":
				if _, err := configv1.Load(strings.NewReader(b.text), configv1.Options{}); err != nil {
					t.Errorf("%s: %v", b, err)
				}
			case "mig-parted config":
				if _, err := mig.ParseBytes([]byte(b.text)); err != nil {
					t.Errorf("%s: %v", b, err)
				}
			case "simulated profile":
				if _, err := sim.Parse(strings.NewReader(b.text), b.String()); err != nil {
					t.Errorf("%s: %v", b, err)
				}
			}
		}
	}
}

// object is one Kubernetes object of the docs, with where it was found.
type object struct {
	where     string
	namespace string
	yaml      string
}

// kubeObjects returns the Kubernetes objects of the docs: the documents of
// every unmarked YAML block and of every YAML file under docs/. Each must
// have an apiVersion and a kind.
func kubeObjects(t *testing.T) []object {
	t.Helper()
	var out []object
	addDocs := func(where, text string) {
		docs, err := yamlDocs(text)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			return
		}
		for i, d := range docs {
			if d["apiVersion"] == nil || d["kind"] == nil {
				t.Errorf("%s: document %d has no apiVersion or kind: mark the block <!-- yaml: fragment --> or with what it is", where, i+1)
				continue
			}
			data, err := yaml.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			o := object{where: fmt.Sprintf("%s (%v %v)", where, d["kind"], name(d)), yaml: string(data)}
			if md, ok := d["metadata"].(map[string]any); ok {
				o.namespace, _ = md["namespace"].(string)
			}
			out = append(out, o)
		}
	}
	for _, p := range pages(t) {
		for _, b := range p.blocks {
			if _, marked := b.mark("yaml"); (b.lang == "yaml" || b.lang == "yml") && !marked {
				addDocs(b.String(), b.text)
			}
		}
	}
	err := filepath.WalkDir(filepath.Join(root(t), "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root(t), path)
		addDocs(rel, string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func name(d map[string]any) any {
	if md, ok := d["metadata"].(map[string]any); ok {
		return md["name"]
	}
	return nil
}

// TestDocsOnControlPlane applies every Kubernetes object of the docs to a
// real control plane, with gpuplane's CRDs and the third-party ones the
// migration guides show (Kueue's and Volcano's, from make third-party-crds)
// installed, by a server-side dry run through kubectl as users run it; then
// runs every shell block that has no needs marker, with gpuplane,
// gpuplane-agent and kubectl on the PATH and KUBECONFIG set to that
// control plane.
func TestDocsOnControlPlane(t *testing.T) {
	objects := kubeObjects(t)
	cfg := localcluster.DefaultConfig()
	cfg.Kwok = false
	framework.RequireBinaries(t, cfg)
	cp := framework.StartControlPlane(t, cfg)
	env, err := framework.NewEnv(cp)
	if err != nil {
		t.Fatal(err)
	}
	env.InstallCRDs(t, filepath.Join(root(t), "deploy", "crds"))
	for _, sub := range []string{"kueue", "volcano-apis"} {
		dir := filepath.Join(cp.BinDir(), "crds", sub)
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("no CRDs at %s (run make third-party-crds): %v", dir, err)
		}
		env.InstallCRDs(t, dir)
	}
	kubectl := filepath.Join(cp.BinDir(), "kubectl")

	t.Run("objects", func(t *testing.T) {
		if len(objects) < 20 {
			t.Fatalf("only %d objects found in the docs: the scan is broken", len(objects))
		}
		namespaces := map[string]bool{}
		for _, o := range objects {
			if o.namespace != "" {
				namespaces[o.namespace] = true
			}
		}
		for ns := range namespaces {
			_, err := env.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating namespace %s: %v", ns, err)
			}
			env.WaitServiceAccount(t, ns, "default", time.Minute)
		}
		for _, o := range objects {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			cmd := exec.CommandContext(ctx, kubectl, "apply", "--server-side", "--dry-run=server", "--field-manager=gpuplane-docs", "-f", "-")
			cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig())
			cmd.Stdin = strings.NewReader(o.yaml)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s: kubectl apply --server-side --dry-run=server: %v\n%s", o.where, err, out)
			}
		}
	})

	t.Run("shell", func(t *testing.T) {
		var run []block
		for _, p := range pages(t) {
			for _, b := range p.blocks {
				if _, needs := b.mark("needs"); shellLangs[b.lang] && !needs {
					run = append(run, b)
				}
			}
		}
		if len(run) == 0 {
			t.Fatal("no runnable shell block in the docs: the scan is broken")
		}
		sort.SliceStable(run, func(i, j int) bool { return run[i].file < run[j].file })
		bin := t.TempDir()
		for _, name := range []string{"gpuplane", "gpuplane-agent"} {
			if _, err := framework.BuildCommand(t.Context(), bin, name); err != nil {
				t.Fatal(err)
			}
		}
		// The blocks of one page run in order in one directory, as a
		// reader follows the page: a later block may use a file an earlier
		// one wrote.
		dirs := map[string]string{}
		for _, b := range run {
			if dirs[b.file] == "" {
				dirs[b.file] = t.TempDir()
			}
			dir := dirs[b.file]
			t.Run(b.String(), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.text)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig(), "TMPDIR="+dir,
					"PATH="+bin+string(os.PathListSeparator)+cp.BinDir()+string(os.PathListSeparator)+os.Getenv("PATH"))
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Run(); err != nil {
					t.Fatalf("%v\n--- block\n%s--- output\n%s", err, b.text, out.String())
				}
				t.Logf("output:\n%s", out.String())
			})
		}
	})
}
