#!/usr/bin/env bash
# hack/demo.sh: gpuplane on a laptop with no GPU and no cluster.
#
# Brings up a local cluster (gpuplane dev up) with three simulated DGX H100
# nodes, each running the real gpuplane-agent: one with whole GPUs, one with
# MIG in mixed strategy, one with time-slicing. Applies examples/, waits for
# the pods, prints which pod got which GPUs, the agent's node labels and a
# few metrics, then stops the cluster (also on failure or Ctrl-C).
#
# Needs bin/gpuplane, bin/gpuplane-agent and the control-plane binaries:
# `make build controlplane-bins` (what `make demo` runs first).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
cd "$root"

for b in gpuplane gpuplane-agent kubectl kube-apiserver etcd; do
	if [[ ! -x "$bin/$b" ]]; then
		echo "demo: $bin/$b is missing; run \`make build controlplane-bins\` first" >&2
		exit 1
	fi
done

# The demo's cluster lives in its own state directory, so a cluster the user
# started with `gpuplane dev up` is left alone.
state=$(mktemp -d "${TMPDIR:-/tmp}/gpuplane-demo.XXXXXX")
export GPUPLANE_DEV_DIR="$state/dev"
export GPUPLANE_CONTROLPLANE_BIN="$bin"
kubectl="$bin/kubectl"
start=$(date +%s.%N)

cleanup() {
	local code=$?
	trap - EXIT INT TERM
	# Stop the cluster even when stdout is a closed pipe (demo | head).
	trap '' PIPE
	# Its output goes to a file first: a closed stdout must not kill it
	# before the cluster is down.
	"$bin/gpuplane" dev down >"$state/down.log" 2>&1 || code=1
	printf '\n== stopping the cluster\n' || true
	cat "$state/down.log" || true
	rm -rf "$state"
	exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

section() { printf '\n== %s\n' "$*"; }

section "starting a local cluster: 3 simulated DGX H100 nodes running gpuplane-agent"
"$bin/gpuplane" dev up --node-profiles dgxh100,dgxh100:mig-mixed,dgxh100:time-slicing=4
export KUBECONFIG="$GPUPLANE_DEV_DIR/kubeconfig"

section "nodes and the GPU labels gpuplane-agent wrote"
"$kubectl" get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.memory,nvidia.com/gpu.count,nvidia.com/mig.strategy

section "applying examples/ (the 4-GPU training job first, so it finds four free GPUs on one node)"
"$kubectl" apply -f examples/06-multi-gpu-training-job.yaml
"$kubectl" apply -f examples/

section "waiting for the pods"
# 6 pods, 2 Job pods, 2 inference replicas and 4 time-sliced notebooks (the
# CronJob runs at 02:00).
want=14
deadline=$((SECONDS + 60))
until [[ $("$kubectl" get pods -n default --no-headers 2>/dev/null | wc -l) -ge $want ]]; do
	if ((SECONDS > deadline)); then
		echo "demo: fewer than $want pods after 60s" >&2
		"$kubectl" get pods -A >&2
		exit 1
	fi
	sleep 0.5
done
"$kubectl" wait -n default --for=jsonpath='{.status.phase}'=Running pods --all --timeout=60s >/dev/null
echo "all $want pods Running"
"$kubectl" get pods -n default -o wide

section "which pod got which devices (gpuplane.io/allocation)"
"$bin/gpuplane" dev status --allocations

section "what the 4-GPU training container gets from the device plugin"
pod=$("$kubectl" get pods -n default -l job-name=pytorch-training -o jsonpath='{.items[0].metadata.name}')
alloc=$("$kubectl" get pod -n default "$pod" -o jsonpath='{.metadata.annotations.gpuplane\.io/allocation}')
echo "pod $pod:"
grep -oE '"node":"[^"]*"|"NVIDIA_VISIBLE_DEVICES":"[^"]*"|"cdiDevices":\[[^]]*\]' <<<"$alloc" | sed 's/^/  /' || true

section "a Job finishing: tf-gpu-job's pod runs its simulated 20 s, then the Job completes"
"$kubectl" wait -n default --for=condition=complete job/tf-gpu-job --timeout=60s

metrics=$("$bin/gpuplane" dev status -o json | sed -n 's/.*"metrics": "\(http[^"]*\)".*/\1/p' | head -1)
if [[ -n "$metrics" ]]; then
	section "a few metrics from gpu-node-1's agent ($metrics)"
	curl -fsS "$metrics" | grep -E '^(DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_GPU_TEMP)\{' | head -6 || true
fi

printf '\n== demo finished in %.1f s (before stopping the cluster)\n' "$(echo "$(date +%s.%N) - $start" | bc)"
