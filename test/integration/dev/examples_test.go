package dev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// kubectl runs bin/kubectl against the dev cluster and returns its output.
func kubectl(t *testing.T, stateDir string, args ...string) (string, error) {
	t.Helper()
	return kubectlCtx(t.Context(), stateDir, args...)
}

// kubectlCtx is kubectl for cleanups, which run after t.Context() ends.
func kubectlCtx(ctx context.Context, stateDir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(cpBinDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(stateDir, "kubeconfig"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// applyAgain runs kubectl apply with args, again while the API server's
// Priority admission refuses a pod of a PriorityClass the same apply has
// just created (it has yet to see the class), as a user would, up to ten
// times; any other error fails t.
func applyAgain(t *testing.T, stateDir string, args ...string) {
	t.Helper()
	for try := 1; ; try++ {
		out, err := kubectl(t, stateDir, append([]string{"apply"}, args...)...)
		if err == nil {
			return
		}
		if try == 10 || !strings.Contains(out, "no PriorityClass with name") {
			t.Fatalf("kubectl apply %v: %v\n%s", args, err, out)
		}
		time.Sleep(time.Second)
	}
}

func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML files in %s: %v", dir, err)
	}
	sort.Strings(files)
	return files
}

// envSeedExamples names the directory of the seed examples, by default
// ../shared/examples beside the checkout.
const envSeedExamples = "GPUPLANE_SEED_EXAMPLES"

// seedExamples returns the directory of the seed examples, or "" when it
// is missing and not required. A fresh clone has no ../shared; CI
// (CI=true) always has it beside the checkout, so there a missing one
// fails the test, as does a directory GPUPLANE_SEED_EXAMPLES names.
func seedExamples(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envSeedExamples)
	named := dir != ""
	if !named {
		dir = filepath.Join(framework.RepoRoot(), "..", "shared", "examples")
	}
	_, err := os.Stat(dir)
	switch {
	case err == nil:
		return dir
	case named:
		t.Fatalf("no seed examples at %s, which %s names: %v", dir, envSeedExamples, err)
	case os.Getenv("CI") == "true":
		t.Fatalf("no seed examples at %s: CI=true requires them; check out shared beside the clone or set %s to their directory (%v)", dir, envSeedExamples, err)
	}
	t.Logf("no seed examples at %s (a fresh clone has none): %v", dir, err)
	return ""
}

// TestExamples applies the project's examples, and the seeds' (see
// seedExamples), to a dev cluster like the demo's.
func TestExamples(t *testing.T) {
	// Before the cluster starts, so that a missing requirement fails at once.
	seeds := seedExamples(t)
	// The DGX H100s run the project's examples; the T4, A100 MIG and
	// A100 80GB nodes are those the seed articles' workloads ask for.
	// The training operator and KubeRay run the PyTorchJob and RayCluster
	// of examples/workloads, as in the demo.
	stateDir, client := cluster(t, "--nodes", "0", "--node-profiles", "dgxh100,dgxh100:mig-mixed,dgxh100:time-slicing=4,4xt4,dgxa100:mig-mixed,8xa100-80gb",
		"--operators", "training-operator,kuberay")
	dumpOnFailure(t, stateDir)
	waitLabelled(t, client, 6)

	t.Run("project examples", func(t *testing.T) {
		dir := filepath.Join(framework.RepoRoot(), "examples")
		// The 4-GPU Job first, as the README says.
		for _, args := range [][]string{{"-f", filepath.Join(dir, "06-multi-gpu-training-job.yaml")}, {"-f", dir}} {
			applyAgain(t, stateDir, args...)
		}
		waitPods(t, client, "default", 14, nil)
		// Each file again through validation and admission on its own,
		// now that the namespaces and PriorityClass it refers to exist.
		for _, f := range yamlFiles(t, dir) {
			if out, err := kubectl(t, stateDir, "apply", "--dry-run=server", "-f", f); err != nil {
				t.Errorf("%s: kubectl apply --dry-run=server: %v\n%s", filepath.Base(f), err, out)
			}
		}
	})

	t.Run("fractions", func(t *testing.T) {
		dir := filepath.Join(framework.RepoRoot(), "examples", "fractions")
		if out, err := kubectl(t, stateDir, "apply", "-f", dir); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", dir, err, out)
		}
		names := []string{"half-a", "half-b", "hami-style", "kai-style", "kai-documented", "hami-documented", "nvlink-pair"}
		chosen := map[string]string{}
		framework.Eventually(t, 60*time.Second, "the fractional pods running with the node's record", func(ctx context.Context) (bool, error) {
			for _, n := range names {
				p, err := client.CoreV1().Pods("default").Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				held, ok := p.Annotations[gpupod.HeldAnnotation]
				if p.Status.Phase != corev1.PodRunning || !ok {
					return false, fmt.Errorf("pod %s %s, record %q", n, p.Status.Phase, held)
				}
				want, got := gpuIndexes(p.Annotations[gpupod.GPUsAnnotation]), gpuIndexes(held)
				if !slices.Equal(want, got) {
					t.Fatalf("pod %s: the scheduler chose %q, the node gave %q", n, p.Annotations[gpupod.GPUsAnnotation], held)
				}
				chosen[n] = p.Spec.NodeName + "/" + p.Annotations[gpupod.GPUsAnnotation]
			}
			return true, nil
		})
		// KAI's documented pod, as the admission policies rewrote it.
		kai, err := client.CoreV1().Pods("default").Get(t.Context(), "kai-documented", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if q := kai.Spec.Containers[0].Resources.Limits[framework.ResourceGPU]; kai.Spec.SchedulerName != v1alpha1.SchedulerName ||
			kai.Labels[v1alpha1.QueueLabel] != "kai-team" || q.String() != "1" {
			t.Errorf("KAI's documented pod: scheduler %q, queue label %q, GPU limit %s; want gpuplane-scheduler, kai-team, 1",
				kai.Spec.SchedulerName, kai.Labels[v1alpha1.QueueLabel], q.String())
		}
		hami, err := client.CoreV1().Pods("default").Get(t.Context(), "hami-documented", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if hami.Spec.SchedulerName != v1alpha1.SchedulerName {
			t.Errorf("HAMi's documented pod went to %q, want gpuplane-scheduler", hami.Spec.SchedulerName)
		}
		// On the time-slicing node, what gpuplane-scheduler chose for its
		// pods and the replicas the node gave kube-scheduler's (the
		// notebooks) never add up to more than a GPU, and the shares pack:
		// six pods holding 2.35 GPUs between them are not spread one to a
		// GPU.
		node, _, _ := strings.Cut(chosen["half-a"], "/")
		onNode, err := client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}
		given, shares, parts := map[int]int64{}, map[int]bool{}, int64(0)
		for _, p := range onNode.Items {
			ours := p.Spec.SchedulerName == v1alpha1.SchedulerName
			rec := p.Annotations[gpupod.GPUsAnnotation] // gpuplane-scheduler's choice
			if !ours {
				rec = p.Annotations[gpupod.HeldAnnotation] // what the node gave
			}
			choice, err := gpupod.ParseGPUs(rec, gpupod.MaxGPUsChosen)
			if err != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			for _, c := range choice {
				m := c.ComputeMilli()
				given[c.Index] += m
				if ours && !c.Whole() {
					shares[c.Index] = true
					parts += m
				}
			}
		}
		for g, m := range given {
			if m > gpupod.MilliPerGPU {
				t.Errorf("GPU %d of %s given %d thousandths in all: %v", g, node, m, given)
			}
		}
		if most := (parts+gpupod.MilliPerGPU-1)/gpupod.MilliPerGPU + 2; int64(len(shares)) > most {
			t.Errorf("gpuplane's shares on %s, %d thousandths of GPU, spread over %d GPUs, want at most %d (given: %v)", node, parts, len(shares), most, given)
		}

		// gpuplane status shows who holds what part of which GPU, from
		// the node's record.
		out, err := exec.CommandContext(t.Context(), filepath.Join(binDir, "gpuplane"), "status", "-o", "json", "--kubeconfig", filepath.Join(stateDir, "kubeconfig")).Output()
		if err != nil {
			t.Fatalf("gpuplane status: %v", err)
		}
		var st struct {
			Nodes []struct {
				Holders []struct{ Pod, GPUs, Part, Source string } `json:"holders"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("gpuplane status -o json: %v\n%s", err, out)
		}
		found := false
		for _, n := range st.Nodes {
			for _, h := range n.Holders {
				if h.Pod == "default/half-a" {
					found = true
					if h.Source != "node" || h.Part != "0.5 GPU, 30Gi" || !strings.HasPrefix(h.GPUs, "GPU ") {
						t.Errorf("status holder %+v, want the node's record and the half asked for", h)
					}
				}
			}
		}
		if !found {
			t.Errorf("gpuplane status lists no holder default/half-a:\n%s", out)
		}
	})

	t.Run("doctor", func(t *testing.T) {
		doctor := func(args ...string) (string, int) {
			cmd := exec.CommandContext(t.Context(), filepath.Join(binDir, "gpuplane"), append([]string{"doctor", "--kubeconfig", filepath.Join(stateDir, "kubeconfig")}, args...)...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("gpuplane doctor %v: %v", args, err)
			}
			return string(out), code
		}
		// A placed fractional pod: the node gave what the scheduler chose.
		out, code := doctor("half-a")
		if code != 0 || !strings.Contains(out, "POD default/half-a: Running on gpu-node-3") || !strings.Contains(out, "the node's record") {
			t.Errorf("doctor half-a (exit %d):\n%s", code, out)
		}
		// A pod that fits no node: the scheduler's reason, and where to look.
		big := build.Pod("default", "too-big").SchedulerName(v1alpha1.SchedulerName).Image("cuda").GPUs(8).Limit(corev1.ResourceCPU, "500").Obj()
		if _, err := client.CoreV1().Pods("default").Create(t.Context(), big, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "the scheduler's reason on too-big", func(context.Context) (bool, error) {
			out, code = doctor("pod", "too-big", "-o", "json")
			return code == 1 && strings.Contains(out, "not placed: "), fmt.Errorf("exit %d: %s", code, out)
		})
		var rep struct {
			Checks []struct{ Name, Result, Detail, Fix string }
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("doctor -o json: %v\n%s", err, out)
		}
		for _, c := range rep.Checks {
			if c.Name == "placement" && (c.Result != "fail" || c.Fix == "") {
				t.Errorf("placement check %+v, want a failure with a fix", c)
			}
		}
		// A cordoned node says so, with the command that undoes it.
		if out, err := kubectl(t, stateDir, "cordon", "gpu-node-2"); err != nil {
			t.Fatalf("kubectl cordon: %v\n%s", err, out)
		}
		out, code = doctor("node", "gpu-node-2")
		if code != 1 || !strings.Contains(out, "kubectl uncordon gpu-node-2") || !strings.Contains(out, "nvidia.com/mig-") ||
			!regexp.MustCompile(`agent\s+ok\s+\d+ GPUs offered as`).MatchString(out) {
			t.Errorf("doctor node gpu-node-2 (cordoned, exit %d):\n%s", code, out)
		}
		if out, err := kubectl(t, stateDir, "uncordon", "gpu-node-2"); err != nil {
			t.Fatalf("kubectl uncordon: %v\n%s", err, out)
		}
		if _, code := doctor("nonesuch"); code != 1 {
			t.Errorf("doctor of a name that is neither pod nor node: exit %d, want 1", code)
		}
	})

	t.Run("GPUs hidden from pods that did not ask", func(t *testing.T) {
		ctx := t.Context()
		pod := func(ns, name string, mutate func(*corev1.Pod)) *corev1.Pod {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
			if mutate != nil {
				mutate(p)
			}
			return p
		}
		// A container that asks for no GPU gets NVIDIA_VISIBLE_DEVICES=void;
		// one that asks for a GPU is left to the device plugin.
		mixed, err := client.CoreV1().Pods("default").Create(ctx, pod("default", "hidden-gpus", func(p *corev1.Pod) {
			p.Spec.SchedulerName = v1alpha1.SchedulerName
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "trainer", Image: "cuda",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{framework.ResourceGPU: resource.MustParse("1")}}})
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		env := func(c corev1.Container) string {
			for _, e := range c.Env {
				if e.Name == "NVIDIA_VISIBLE_DEVICES" {
					return e.Value
				}
			}
			return "(unset)"
		}
		if got, want := []string{env(mixed.Spec.Containers[0]), env(mixed.Spec.Containers[1])}, []string{"void", "(unset)"}; !slices.Equal(got, want) {
			t.Errorf("NVIDIA_VISIBLE_DEVICES of a container without and one with a GPU = %q, want %q", got, want)
		}
		// The ways around it are refused, each with its reason.
		for name, tc := range map[string]struct {
			mutate func(*corev1.Pod)
			want   string
		}{
			"sets-visible-devices": {func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
			}, "container main sets NVIDIA_VISIBLE_DEVICES"},
			"mounts-dev-nvidia": {func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "gpu0", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/nvidia0"}}}}
			}, "volume gpu0 mounts the host's GPU device nodes"},
			"privileged": {func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			}, "container main runs privileged"},
		} {
			_, err := client.CoreV1().Pods("default").Create(ctx, pod("default", name, tc.mutate), metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("pod %s: created with error %v, want it refused saying %q", name, err, tc.want)
			}
		}
		// A namespace that runs GPU infrastructure may, once labelled.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu-infra", Labels: map[string]string{"gpuplane.io/unrestricted-gpu-access": "true"}}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		infra, err := client.CoreV1().Pods("gpu-infra").Create(ctx, pod("gpu-infra", "exporter", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a privileged pod in a namespace labelled gpuplane.io/unrestricted-gpu-access: %v", err)
		}
		if got := env(infra.Spec.Containers[0]); got != "(unset)" {
			t.Errorf("NVIDIA_VISIBLE_DEVICES in an unrestricted namespace = %q, want it left alone", got)
		}
	})

	// Last of the project's examples: its gang takes four GPUs for 30 s,
	// which the examples above must not wait for.
	t.Run("workloads", func(t *testing.T) {
		dir := filepath.Join(framework.RepoRoot(), "examples", "workloads")
		if out, err := kubectl(t, stateDir, "apply", "-f", dir); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", dir, err, out)
		}
		// The Indexed Job runs as one gang of four, in the group the
		// scheduler derived from it; so do the PyTorchJob's master and
		// three workers (made by the training operator) and the
		// RayCluster's head and two workers (made by KubeRay).
		for _, g := range []struct {
			selector, groupPrefix string
			pods                  int
		}{
			{"job-name=ddp-train", "job-ddp-train-", 4},
			{"training.kubeflow.org/job-name=resnet-ddp", "pytorchjob-resnet-ddp-", 4},
			{"ray.io/cluster=ray-gpu", "raycluster-ray-gpu-", 3},
		} {
			waitGang(t, client, g.selector, g.groupPrefix, g.pods)
		}
		// Every workload's group says where its size came from.
		groups, err := kubectl(t, stateDir, "get", "podgroups", "-l", v1alpha1.DerivedLabel+"=true",
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.minMember} {.metadata.annotations.scheduling\.gpuplane\.io/derived-from}{"\n"}{end}`)
		if err != nil {
			t.Fatalf("listing the derived PodGroups: %v\n%s", err, groups)
		}
		for _, want := range []string{" 4 PyTorchJob.kubeflow.org default/resnet-ddp", " 3 RayCluster.ray.io default/ray-gpu", " 4 Job.batch default/ddp-train"} {
			if !strings.Contains(groups, want) {
				t.Errorf("no derived PodGroup %q among:\n%s", want, groups)
			}
		}
		// dev status lists the operators among the cluster's processes.
		if out, code := gpuplane(t, stateDir, "dev", "status"); code != 0 || !regexp.MustCompile(`operator/training-operator\s+\d+\s+true`).MatchString(out) ||
			!regexp.MustCompile(`operator/kuberay\s+\d+\s+true`).MatchString(out) {
			t.Errorf("dev status (exit %d) does not show both operators running:\n%s", code, out)
		}
		out, err := kubectl(t, stateDir, "get", "groupingrules", "volcano-jobs", "-o", "jsonpath={.status.conditions[0].status}")
		if err != nil || strings.TrimSpace(out) != "True" {
			t.Errorf("GroupingRule volcano-jobs Valid = %q (%v), want True", out, err)
		}
		// Their GPUs back for what follows.
		for _, w := range []string{"job/ddp-train", "pytorchjob/resnet-ddp", "raycluster/ray-gpu"} {
			if out, err := kubectl(t, stateDir, "delete", w, "--cascade=foreground", "--wait=true", "--timeout=60s"); err != nil {
				t.Errorf("deleting %s: %v\n%s", w, err, out)
			}
		}
	})

	t.Run("seed examples", func(t *testing.T) {
		if seeds == "" {
			t.Skipf("no seed examples (a fresh clone has none; CI=true or %s requires them)", envSeedExamples)
		}
		dir := seeds
		// Examples that need other projects' CRDs.
		needCRD := map[string]string{"14-pytorchjob.yaml": "Kubeflow's training operator", "15-gpu-alerts.yaml": "the Prometheus operator"}
		// 03 asks for a node the operator labelled gpu-type=tesla-t4, as
		// its article says to do.
		nodes, err := client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: "nvidia.com/gpu.product=Tesla-T4"})
		if err != nil || len(nodes.Items) != 1 {
			t.Fatalf("the T4 node: %v (%d found)", err, len(nodes.Items))
		}
		if out, err := kubectl(t, stateDir, "label", "node", nodes.Items[0].Name, "gpu-type=tesla-t4"); err != nil {
			t.Fatalf("labelling the T4 node: %v\n%s", err, out)
		}
		for _, ns := range []string{"seeds", "gpu-operator", "nvidia-device-plugin", "ml-team"} {
			if out, err := kubectl(t, stateDir, "create", "namespace", ns); err != nil && !strings.Contains(out, "AlreadyExists") {
				t.Fatalf("creating namespace %s: %v\n%s", ns, err, out)
			}
		}
		env := &framework.Env{Client: client}
		env.WaitServiceAccount(t, "seeds", "default", 30*time.Second)
		start := time.Now()
		// The pods that must have a T4 (03, and 07's two replicas) are
		// applied and running first: the T4 node has 4 GPUs and they take
		// 3, and kube-scheduler, which places the seeds, may otherwise put
		// 04's unconstrained two-GPU pod there first (its scores tie).
		files := yamlFiles(t, dir)
		t4 := func(f string) bool {
			return strings.Contains(readFile(f), "gpu-type") || strings.Contains(readFile(f), "Tesla-T4")
		}
		slices.SortStableFunc(files, func(a, b string) int {
			switch {
			case t4(a) && !t4(b):
				return -1
			case t4(b) && !t4(a):
				return 1
			}
			return 0
		})
		for i, f := range files {
			if i > 0 && t4(files[i-1]) && !t4(f) {
				waitPods(t, client, "seeds", 3, nil) // 03's pod, 07's two replicas
			}
			name := filepath.Base(f)
			if why, ok := needCRD[name]; ok {
				t.Logf("%s needs %s; not applied", name, why)
				continue
			}
			args := []string{"apply", "-f", f}
			if !strings.Contains(readFile(f), "namespace:") {
				args = append(args, "-n", "seeds")
			}
			if out, err := kubectl(t, stateDir, append(args, "--dry-run=server")...); err != nil {
				t.Errorf("%s: kubectl apply --dry-run=server: %v\n%s", name, err, out)
				continue
			}
			if out, err := kubectl(t, stateDir, args...); err != nil {
				t.Errorf("%s: kubectl apply: %v\n%s", name, err, out)
			}
		}
		t.Logf("seed examples applied in %v", time.Since(start).Round(time.Millisecond))
		// Every workload runs: 01, 02, 04, 05 (its Job's pod) and 12 on
		// the H100s, 03 and 07 (2 replicas) on the T4s, 06 on the A100
		// 80GB node, 08 in a 1g.5gb MIG slice of an A100 40GB.
		waitPods(t, client, "seeds", 10, nil)
	})
}

// waitGang waits until the pods matching selector are n, all in one
// PodGroup whose name starts with groupPrefix (the one the scheduler derived
// from their workload), and all bound.
func waitGang(t *testing.T, client kubernetes.Interface, selector, groupPrefix string, n int) {
	t.Helper()
	framework.Eventually(t, 120*time.Second, fmt.Sprintf("the %d pods of %s bound in their derived group", n, selector), func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		bound, group := 0, ""
		for _, p := range list.Items {
			g := p.Labels[v1alpha1.PodGroupLabel]
			if !strings.HasPrefix(g, groupPrefix) || (group != "" && g != group) {
				return false, fmt.Errorf("pod %s in group %q", p.Name, g)
			}
			group = g
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == n && len(list.Items) == n, fmt.Errorf("%d of %d pods bound", bound, len(list.Items))
	})
}

// waitLabelled waits until n agent nodes carry their GPU product label, so
// examples that select on it can be scheduled.
func waitLabelled(t *testing.T, client kubernetes.Interface, n int) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "GPU labels on the nodes", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nvidia.com/gpu.product"})
		return err == nil && len(list.Items) == n, err
	})
}

// waitPods waits until the namespace has want pods, each Running with an
// allocation, except those pending(p) says must stay unschedulable.
func waitPods(t *testing.T, client kubernetes.Interface, ns string, want int, pending func(*corev1.Pod) bool) {
	t.Helper()
	start := time.Now()
	framework.Eventually(t, 90*time.Second, fmt.Sprintf("%d pods of %s settled", want, ns), func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		// Every pod not yet as it should be, so a timeout shows them all.
		var unsettled []string
		for i := range list.Items {
			p := &list.Items[i]
			if pending != nil && pending(p) {
				if !unschedulableNow(p) {
					unsettled = append(unsettled, fmt.Sprintf("%s: phase %s, want Pending and Unschedulable", p.Name, p.Status.Phase))
				}
				continue
			}
			if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodSucceeded {
				unsettled = append(unsettled, fmt.Sprintf("%s: %s on %q %s %s", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Message, framework.SchedulerSays(p)))
				continue
			}
			if a, err := gpupod.ReadAllocation(p); err != nil || a == nil {
				unsettled = append(unsettled, fmt.Sprintf("%s has no allocation: %v", p.Name, err))
			}
		}
		if len(list.Items) != want || len(unsettled) > 0 {
			return false, fmt.Errorf("%d pods, want %d; unsettled: [%s]", len(list.Items), want, strings.Join(unsettled, "; "))
		}
		return true, nil
	})
	t.Logf("%d pods of %s settled in %v", want, ns, time.Since(start).Round(time.Millisecond))
}

// dumpOnFailure logs, when the test has failed, what a person debugging it
// would look at first: every pod, the recent events and the end of the
// scheduler's log. It runs before the cluster is taken down.
func dumpOnFailure(t *testing.T, stateDir string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, args := range [][]string{{"get", "pods", "-A", "-o", "wide"}, {"get", "events", "-A", "--sort-by=.lastTimestamp"}} {
			out, err := kubectlCtx(context.Background(), stateDir, args...)
			t.Logf("kubectl %s (%v):\n%s", strings.Join(args, " "), err, localcluster.Tail(out, 80))
		}
		t.Logf("end of the scheduler's log:\n%s", localcluster.TailFile(filepath.Join(stateDir, "gpuplane-scheduler.log"), 80))
	})
}

func unschedulableNow(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return p.Status.Phase == corev1.PodPending && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// gpuIndexes lists the GPU indexes a gpuplane.io/gpus value names.
func gpuIndexes(s string) []int {
	choice, err := gpupod.ParseGPUs(s, gpupod.MaxGPUsChosen)
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(choice))
	for _, c := range choice {
		out = append(out, c.Index)
	}
	slices.Sort(out)
	return out
}
