package topology

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
)

// maxLevels matches Topology spec.levels' bound.
const maxLevels = 16

// maxInput bounds what -f reads.
const maxInput = 64 << 20

// The Topology resources convert reads from a cluster, newest version of
// each first.
var sources = []struct {
	from string
	gvrs []schema.GroupVersionResource
}{
	{"kueue", []schema.GroupVersionResource{
		{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"},
		{Group: "kueue.x-k8s.io", Version: "v1beta1", Resource: "topologies"},
		{Group: "kueue.x-k8s.io", Version: "v1alpha1", Resource: "topologies"},
	}},
	{"kai", []schema.GroupVersionResource{{Group: "kai.scheduler", Version: "v1alpha1", Resource: "topologies"}}},
}

// NewCommand returns the topology command.
func NewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Work with the Topologies gangs are placed by",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newConvertCommand())
	return cmd
}

type convertOptions struct {
	file, from string
	output     *cliutil.Format
	cluster    *clusterflags.Cluster
}

func newConvertCommand() *cobra.Command {
	o := &convertOptions{}
	cmd := &cobra.Command{
		Use:   "convert [NAME...]",
		Short: "Write Kueue's and KAI's Topology objects as gpuplane Topologies",
		Long: `convert reads Kueue Topologies (kueue.x-k8s.io) and KAI Topologies
(kai.scheduler/v1alpha1), from the YAML or JSON documents of -f (- for stdin)
or, without -f, from the cluster (--kubeconfig, --context), and writes each
as a gpuplane Topology (scheduling.gpuplane.io/v1alpha1) of the same name
and levels: YAML documents by default, for kubectl apply -f; -o json a List;
-o table each Topology's name and levels, -o wide also what it was
converted from. NAMEs pick some of them. It changes nothing in the cluster. gpuplane-scheduler reads Kueue's and KAI's Topologies as they
are; a converted one is gpuplane's own.`,
		Example: `  gpuplane topology convert -f kueue-topology.yaml | kubectl apply -f -
  gpuplane topology convert --from kai -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.from != "" && o.from != "kueue" && o.from != "kai" {
				return cliutil.Usagef("--from %s: want kueue or kai (default: both)", o.from)
			}
			var objs []*unstructured.Unstructured
			if o.file != "" {
				objs, err = readFile(cmd.InOrStdin(), o.file)
			} else {
				objs, err = readCluster(cmd.Context(), o.cluster, o.from)
			}
			if err != nil {
				return err
			}
			out, err := Convert(objs, o.from, args)
			if err != nil {
				return err
			}
			return write(cmd.OutOrStdout(), *o.output, out)
		},
	}
	cmd.Flags().StringVarP(&o.file, "filename", "f", "", "file of Kueue or KAI Topologies (YAML documents or JSON; - for stdin); without it, read them from the cluster")
	o.output = cliutil.AddOutputFlag(cmd, cliutil.YAML, "yaml and json are the Topologies to apply, table their names and levels, wide also what each was converted from")
	o.cluster = clusterflags.Add(cmd, clusterflags.ClusterScoped)
	cmd.Flags().StringVar(&o.from, "from", "", "convert only kueue's or kai's Topologies (default: both)")
	return cmd
}

// readFile reads the objects of a file of YAML documents or JSON (a List's
// items are its objects).
func readFile(stdin io.Reader, path string) ([]*unstructured.Unstructured, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("-f: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", path, err)
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("-f %s: larger than %d MiB", path, maxInput>>20)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("-f %s: document %d: %w", path, i, err)
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			if err := u.EachListItem(func(o runtime.Object) error {
				item, ok := o.(*unstructured.Unstructured)
				if ok {
					out = append(out, item)
				}
				return nil
			}); err != nil {
				return nil, fmt.Errorf("-f %s: document %d: %w", path, i, err)
			}
			continue
		}
		out = append(out, u)
	}
	return out, nil
}

// readCluster lists the cluster's Kueue and KAI Topologies (only from's,
// when set), each resource at the newest version the cluster serves.
func readCluster(ctx context.Context, cluster *clusterflags.Cluster, from string) ([]*unstructured.Unstructured, error) {
	rc, err := cluster.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("%w (or read a file with -f)", err)
	}
	d, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building the API client: %w", err)
	}
	var out []*unstructured.Unstructured
	served := 0
	for _, s := range sources {
		if from != "" && s.from != from {
			continue
		}
		for _, gvr := range s.gvrs {
			list, err := d.Resource(gvr).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) {
				continue // not served at this version
			}
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
			}
			served++
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			break
		}
	}
	if served == 0 {
		return nil, errors.New("the cluster serves neither Kueue's nor KAI's Topology: nothing to convert (read a file with -f)")
	}
	return out, nil
}

// Convert makes a gpuplane Topology of each Kueue or KAI Topology of objs
// (only from's, "kueue" or "kai", when set; only those named, when names
// are given), in input order. A gpuplane Topology is kept as it is. Any
// other object, a Topology whose levels are not node label keys, two
// objects converting to one name, or a name given that matches none is an
// error naming the object and field.
func Convert(objs []*unstructured.Unstructured, from string, names []string) ([]*v1alpha1.Topology, error) {
	var out []*v1alpha1.Topology
	seen := map[string]string{}
	for i, u := range objs {
		gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
		if err != nil {
			return nil, fmt.Errorf("object %d: apiVersion %q: %w", i, u.GetAPIVersion(), err)
		}
		desc := fmt.Sprintf("%s %s %s", u.GetAPIVersion(), u.GetKind(), u.GetName())
		src := ""
		switch {
		case u.GetKind() != "Topology":
			return nil, fmt.Errorf("object %d (%s): not a Topology; give only Kueue's (kueue.x-k8s.io) or KAI's (kai.scheduler) Topologies", i, desc)
		case gv.Group == "kueue.x-k8s.io":
			src = "kueue"
		case gv.Group == "kai.scheduler":
			src = "kai"
		case gv.Group == v1alpha1.GroupName:
			src = "gpuplane"
		default:
			return nil, fmt.Errorf("object %d (%s): a Topology of %s, which gpuplane does not read; give Kueue's or KAI's", i, desc, gv.Group)
		}
		if (from != "" && src != from && src != "gpuplane") || (len(names) > 0 && !slices.Contains(names, u.GetName())) {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(u.GetName()); len(errs) > 0 {
			return nil, fmt.Errorf("object %d (%s): metadata.name: %s", i, desc, strings.Join(errs, "; "))
		}
		t := &v1alpha1.Topology{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Topology"},
			ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
		if src != "gpuplane" {
			t.Annotations = map[string]string{v1alpha1.ConvertedFromAnnotation: desc}
		} else if a := u.GetAnnotations()[v1alpha1.ConvertedFromAnnotation]; a != "" {
			t.Annotations = map[string]string{v1alpha1.ConvertedFromAnnotation: a}
		}
		levels, err := levelsOf(u.Object)
		if err != nil {
			return nil, fmt.Errorf("object %d (%s): %w", i, desc, err)
		}
		for _, l := range levels {
			t.Spec.Levels = append(t.Spec.Levels, v1alpha1.TopologyLevel{NodeLabel: l})
		}
		if prev, ok := seen[t.Name]; ok {
			return nil, fmt.Errorf("object %d (%s) and %s both make Topology %s: convert one of them (--from, or NAMEs)", i, desc, prev, t.Name)
		}
		seen[t.Name] = desc
		out = append(out, t)
	}
	for _, n := range names {
		if _, ok := seen[n]; !ok {
			return nil, fmt.Errorf("no Topology named %s to convert", n)
		}
	}
	return out, nil
}

// levelsOf reads spec.levels[].nodeLabel, checked as gpuplane's Topology
// checks its own.
func levelsOf(obj map[string]any) ([]string, error) {
	spec, _ := obj["spec"].(map[string]any)
	raw, ok := spec["levels"].([]any)
	switch {
	case !ok || len(raw) == 0:
		return nil, errors.New("spec.levels: none; a Topology lists at least one node label, widest first")
	case len(raw) > maxLevels:
		return nil, fmt.Errorf("spec.levels: %d levels, at most %d", len(raw), maxLevels)
	}
	out := make([]string, len(raw))
	for i, l := range raw {
		m, _ := l.(map[string]any)
		key, _ := m["nodeLabel"].(string)
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, fmt.Errorf("spec.levels[%d].nodeLabel: %q is not a node label key: %s", i, key, strings.Join(errs, "; "))
		}
		if j := slices.Index(out[:i], key); j >= 0 {
			return nil, fmt.Errorf("spec.levels[%d].nodeLabel: %q is levels[%d] already", i, key, j)
		}
		out[i] = key
	}
	return out, nil
}

// write prints the Topologies as YAML documents, a JSON List, or a table
// of their names and levels (wide: and what each was converted from).
func write(w io.Writer, format cliutil.Format, ts []*v1alpha1.Topology) error {
	if format == cliutil.Table || format == cliutil.Wide {
		tw := cliutil.NewTable(w)
		head := "NAME\tLEVELS"
		if format == cliutil.Wide {
			head += "\tCONVERTED FROM"
		}
		fmt.Fprintln(tw, head)
		for _, t := range ts {
			levels := make([]string, len(t.Spec.Levels))
			for i, l := range t.Spec.Levels {
				levels[i] = l.NodeLabel
			}
			fmt.Fprintf(tw, "%s\t%s", t.Name, strings.Join(levels, ","))
			if format == cliutil.Wide {
				from := t.Annotations[v1alpha1.ConvertedFromAnnotation]
				if from == "" {
					from = "-"
				}
				fmt.Fprintf(tw, "\t%s", from)
			}
			fmt.Fprintln(tw)
		}
		return tw.Flush()
	}
	if format == cliutil.JSON {
		items := make([]any, len(ts))
		for i, t := range ts {
			items[i] = t
		}
		return cliutil.Encode(w, format, map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	}
	var buf bytes.Buffer
	for i, t := range ts {
		b, err := yaml.Marshal(t)
		if err != nil {
			return fmt.Errorf("encoding Topology %s: %w", t.Name, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
