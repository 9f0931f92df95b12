#!/usr/bin/env bash
# hack/demo.sh: gpuplane on a laptop with no GPU and no cluster.
#
# Brings up a local cluster (gpuplane dev up) with six simulated DGX H100
# nodes, each running the real gpuplane-agent: one with whole GPUs, one with
# MIG in mixed strategy, one with time-slicing, a batch pool for two teams'
# queues, one more with whole GPUs and one with two empty GPUs in MIG mode
# whose MIG devices the DRA driver creates for claims; gpuplane-scheduler; and two workload
# operators as users run them (Kubeflow's training operator, KubeRay); serves
# the web view (gpuplane ui) and prints its address while each cluster is up.
# Applies examples/, waits for the pods, prints which pod got which GPUs, the
# agent's node labels and a few metrics, re-partitions one GPU of the MIG
# node live through its nvidia.com/mig.config label, runs the teams' queues, then submits
# an Indexed Job, a PyTorchJob and a RayCluster as users write them and shows
# the gangs gpuplane-scheduler derived from them, fails a GPU (it falls off
# the bus) and shows the agent quarantine it and bring it back; then starts
# a second cluster of two GB200 NVL72 racks (--topology) and shows a gang
# that requires one NVLink domain placed inside the one rack that can hold
# it; then a third cluster with no GPU node and a Karpenter NodePool of DGX
# H100s: a gang buys exactly its nodes, work over its queue's quota buys
# none, and the nodes go once the gang ends; and stops the cluster (also on
# failure or Ctrl-C).
#
# Needs bin/gpuplane, bin/gpuplane-agent, the control-plane binaries and the
# three operators (the training operator, KubeRay, Karpenter):
# `make build controlplane-bins demo-operator-bins` (what `make demo` runs
# first).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
cd "$root"

for b in gpuplane gpuplane-agent kubectl kube-apiserver etcd operators/training-operator operators/kuberay operators/karpenter; do
	if [[ ! -x "$bin/$b" ]]; then
		echo "demo: $bin/$b is missing; run \`make build controlplane-bins demo-operator-bins\` first" >&2
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
	stop_ui
	"$bin/gpuplane" dev down >"$state/down.log" 2>&1 || code=1
	printf '\n== stopping the cluster\n' || true
	cat "$state/down.log" || true
	rm -rf "$state"
	exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

section() { printf '\n== %s\n' "$*"; }

# start_ui serves the web view of the running cluster on a free loopback
# port in the background and prints its address; stop_ui stops it.
start_ui() {
	"$bin/gpuplane" ui --address 127.0.0.1:0 --pool-label gpuplane.io/pool >"$state/ui.log" 2>&1 &
	ui_pid=$!
	for _ in $(seq 120); do
		grep -q '^gpuplane ui: serving ' "$state/ui.log" && break
		kill -0 "$ui_pid" 2>/dev/null || { cat "$state/ui.log" >&2; exit 1; }
		sleep 0.5
	done
	ui_url=$(sed -n 's/^gpuplane ui: serving \([^ ]*\).*/\1/p' "$state/ui.log")
	[[ -n "$ui_url" ]] || { echo "demo: gpuplane ui did not start:" >&2; cat "$state/ui.log" >&2; exit 1; }
	echo "web view: open $ui_url while the cluster is up (GPU map, queues, waiting gangs with the core's what-if, cost)"
}
stop_ui() {
	if [[ -n "${ui_pid:-}" ]]; then
		kill "$ui_pid" 2>/dev/null || true
		wait "$ui_pid" 2>/dev/null || true
		ui_pid=
	fi
}

section "starting a local cluster: 6 simulated DGX H100 nodes running gpuplane-agent (device plugin and DRA driver), gpuplane-scheduler, the training operator and KubeRay"
"$bin/gpuplane" dev up --scheduler gpuplane --operators training-operator,kuberay \
	--node-profiles dgxh100,dgxh100:mig-mixed,dgxh100:time-slicing=4,dgxh100,dgxh100,dgxh100:mig-dynamic
export KUBECONFIG="$GPUPLANE_DEV_DIR/kubeconfig"
# The fourth node is the teams' batch pool: only work that asks for it lands
# there, so the queues below compete for exactly its 8 GPUs.
"$kubectl" label node gpu-node-4 gpuplane.io/pool=batch >/dev/null
"$kubectl" taint node gpu-node-4 gpuplane.io/pool=batch:NoSchedule >/dev/null

section "the web view: gpuplane ui, reading the cluster with its kubeconfig"
start_ui

section "nodes and the GPU labels gpuplane-agent wrote"
"$kubectl" get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.memory,nvidia.com/gpu.count,nvidia.com/mig.strategy

section "applying examples/ (the 4-GPU training job first, so it finds four free GPUs on one node)"
"$kubectl" apply -f examples/06-multi-gpu-training-job.yaml
# examples/ creates a PriorityClass and, in a later file, a pod of it: the
# API server's Priority admission can refuse the pod until it has seen the
# class. Applying again is what a user does; only that refusal is retried.
for try in 1 2 3 4 5 6 7 8 9 10; do
	if out=$("$kubectl" apply -f examples/ 2>&1); then
		printf '%s\n' "$out"
		break
	fi
	if [[ $try == 10 || $out != *"no PriorityClass with name"* ]]; then
		printf '%s\n' "$out" >&2
		exit 1
	fi
	sleep 1
done

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

section "gpuplane-scheduler chooses the GPUs, the node gives exactly those (examples/fractions)"
"$kubectl" apply -f examples/fractions/
# The agent records what the kubelet gave each pod within a second or two.
deadline=$((SECONDS + 60))
until [[ $("$kubectl" get pods half-a half-b hami-style kai-style kai-documented hami-documented nvlink-pair -o jsonpath='{range .items[*]}{.metadata.annotations.gpuplane\.io/gpus-held}{"\n"}{end}' 2>/dev/null | grep -c .) -ge 7 ]]; do
	if ((SECONDS > deadline)); then
		echo "demo: the node did not record what the fractional pods hold within 60 s" >&2
		"$kubectl" get pods -o wide >&2
		exit 1
	fi
	sleep 0.5
done
echo "half-GPU pods pair up on one GPU, the HAMi- and KAI-style parts fill others, the pair is NVLink-connected;"
echo "kai-documented and hami-documented are KAI's and HAMi's documented pods as written (no GPU"
echo "device, schedulerName kai-scheduler; no scheduler named), which gpuplane's admission policies"
echo "(deploy/admission) handed to gpuplane-scheduler;"
echo "CHOSEN is the scheduler's gpuplane.io/gpus, GIVEN the node's gpuplane.io/gpus-held (a replica of a"
echo "time-sliced GPU is 1/4 of it):"
"$kubectl" get pods half-a half-b hami-style kai-style kai-documented hami-documented nvlink-pair \
	-o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,CHOSEN:.metadata.annotations.gpuplane\.io/gpus,GIVEN:.metadata.annotations.gpuplane\.io/gpus-held'

section "what the 4-GPU training container gets from the device plugin"
pod=$("$kubectl" get pods -n default -l job-name=pytorch-training -o jsonpath='{.items[0].metadata.name}')
alloc=$("$kubectl" get pod -n default "$pod" -o jsonpath='{.metadata.annotations.gpuplane\.io/allocation}')
echo "pod $pod:"
grep -oE '"node":"[^"]*"|"NVIDIA_VISIBLE_DEVICES":"[^"]*"|"cdiDevices":\[[^]]*\]' <<<"$alloc" | sed 's/^/  /' || true

section "a Job finishing: tf-gpu-job's pod runs its simulated 20 s, then the Job completes"
"$kubectl" wait -n default --for=condition=complete job/tf-gpu-job --timeout=60s

section "declarative MIG: one GPU of gpu-node-2 re-partitioned live, the others untouched (nvidia.com/mig.config)"
# The agent reads mig-parted's configs from a ConfigMap; an operator adds
# one of their own: GPU 7 into seven 1g.10gb devices, every other GPU as it
# is (mig-parted leaves the GPUs an entry does not select alone).
"$kubectl" get configmap -n gpuplane-system default-mig-parted-config -o jsonpath='{.data.config\.yaml}' >"$state/mig.yaml"
printf '%s\n' '  demo-gpu7-1g:' '    - devices: [7]' '      mig-enabled: true' '      mig-devices:' '        "1g.10gb": 7' >>"$state/mig.yaml"
"$kubectl" create configmap -n gpuplane-system default-mig-parted-config --from-file=config.yaml="$state/mig.yaml" \
	--dry-run=client -o yaml | "$kubectl" replace -f - >/dev/null
allocatable() {
	"$kubectl" get node gpu-node-2 -o jsonpath='nvidia.com/gpu {.status.allocatable.nvidia\.com/gpu}, mig-1g.10gb {.status.allocatable.nvidia\.com/mig-1g\.10gb}, mig-3g.40gb {.status.allocatable.nvidia\.com/mig-3g\.40gb}'
}
echo "gpuplane mig plan shows what labelling the node would change and which pods would move:"
"$bin/gpuplane" mig plan gpu-node-2 demo-gpu7-1g
echo
echo "allocatable before: $(allocatable)"
mig_start=$(date +%s.%N)
"$kubectl" label node gpu-node-2 nvidia.com/mig.config=demo-gpu7-1g --overwrite >/dev/null
deadline=$((SECONDS + 60))
until [[ $("$kubectl" get node gpu-node-2 -o jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}') == success && $(allocatable) == *"mig-1g.10gb 14"* ]]; do
	if ((SECONDS > deadline)); then
		echo "demo: gpu-node-2 did not reach nvidia.com/mig.config.state=success with 14 mig-1g.10gb devices within 60 s: $(allocatable)" >&2
		"$kubectl" get node gpu-node-2 -o jsonpath='{.status.conditions[?(@.type=="MIGConfigApplied")]}' >&2
		exit 1
	fi
	sleep 0.2
done
printf 'state success, new devices allocatable, in %.1f s: %s\n' "$(echo "$(date +%s.%N) - $mig_start" | bc)" \
	"$("$kubectl" get node gpu-node-2 -o jsonpath='{.status.conditions[?(@.type=="MIGConfigApplied")].message}')"
echo "allocatable after:  $(allocatable)"

metrics=$("$bin/gpuplane" dev status -o json | sed -n 's/.*"metrics": "\(http[^"]*\)".*/\1/p' | head -1)
if [[ -n "$metrics" ]]; then
	section "a few metrics from gpu-node-1's agent ($metrics)"
	curl -fsS "$metrics" | grep -E '^(DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_GPU_TEMP)\{' | head -6 || true
fi

section "two teams' queues on the batch pool (examples/queues): team B borrows, team A reclaims for a gang"
"$kubectl" apply -f examples/queues/01-queues.yaml
"$kubectl" apply -f examples/queues/02-team-b-inference.yaml
wait_running() { # label-selector count timeout-seconds
	local deadline=$((SECONDS + $3)) n
	while :; do
		n=$("$kubectl" get pods -l "$1" --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)
		((n >= $2)) && return 0
		if ((SECONDS > deadline)); then
			echo "demo: $n of $2 pods ($1) Running after $3 s" >&2
			"$kubectl" get pods -l "$1" -o wide >&2
			return 1
		fi
		sleep 0.5
	done
}
# Queue status trails the cluster by a second or two (the scheduler writes it
# at a bounded rate); wait for it before showing it.
wait_queue_usage() { # queue gpus
	local deadline=$((SECONDS + 30))
	until [[ $("$kubectl" get queue "$1" -o jsonpath='{.status.usage.nvidia\.com/gpu}') == "$2" ]]; do
		if ((SECONDS > deadline)); then
			echo "demo: queue $1's status does not show $2 GPUs in use after 30 s" >&2
			return 1
		fi
		sleep 0.5
	done
}
wait_running app=team-b-inference 6 60
wait_queue_usage team-b 6
echo "team B runs 6 workers on the pool's 8 GPUs: 4 guaranteed, 2 borrowed from team A's idle guarantee"
"$kubectl" get queues
echo
echo "team A submits a 4-pod gang; only 2 GPUs are free, and team A is below its guarantee of 4:"
"$kubectl" apply -f examples/queues/03-team-a-training-gang.yaml
wait_running scheduling.gpuplane.io/pod-group=team-a-training 4 90
wait_queue_usage team-a 4
wait_queue_usage team-b 4
echo "the gang bound whole after team B's 2 borrowed GPUs were reclaimed:"
"$kubectl" get events --field-selector reason=Preempted -o custom-columns=POD:.involvedObject.name,MESSAGE:.message
echo
echo "where the gang went, as committed to its PodGroup before any member was bound:"
"$kubectl" get podgroup team-a-training -o jsonpath='{range .status.placement[*]}  {.pod} -> {.node} GPU {.gpus}{"\n"}{end}'
echo
# The Deployment replaced the 2 evicted workers; they wait for room, and
# say why.
deadline=$((SECONDS + 30))
until "$bin/gpuplane" status -o json | grep -q 'insufficient nvidia.com/gpu'; do
	if ((SECONDS > deadline)); then
		echo "demo: team B's waiting replacements were not explained within 30 s" >&2
		"$bin/gpuplane" status >&2
		exit 1
	fi
	sleep 0.5
done
"$kubectl" get pods -l 'scheduling.gpuplane.io/queue in (team-a,team-b)' -o wide

section "workloads as users submit them (examples/workloads): an Indexed Job, a PyTorchJob, a RayCluster; no PodGroup written"
"$kubectl" apply -f examples/workloads/01-indexed-job-gang.yaml \
	-f examples/workloads/04-pytorchjob.yaml -f examples/workloads/05-raycluster.yaml
# Each gang's pods, by the labels their controllers put on them, and how
# many there are: the Job's 4 workers, the PyTorchJob's master and 3 workers
# (made by the training operator), the RayCluster's head and 2 workers (made
# by KubeRay).
gangs=("job-name=ddp-train" 4 "training.kubeflow.org/job-name=resnet-ddp" 4 "ray.io/cluster=ray-gpu" 3)
deadline=$((SECONDS + 90))
for ((i = 0; i < ${#gangs[@]}; i += 2)); do
	sel=${gangs[i]} want=${gangs[i + 1]}
	until [[ "$("$kubectl" get pods -l "$sel" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c .)" == "$want" ]]; do
		if ((SECONDS > deadline)); then
			echo "demo: the $want pods of $sel were not all bound within 90 s" >&2
			"$kubectl" get pods -l "$sel" -o wide >&2
			"$bin/gpuplane" status >&2
			exit 1
		fi
		sleep 0.5
	done
done
echo "the PodGroups gpuplane-scheduler derived, each from the workload that owns the pods:"
"$kubectl" get podgroups -l scheduling.gpuplane.io/derived=true \
	-o custom-columns='PODGROUP:.metadata.name,MIN:.spec.minMember,QUEUE:.spec.queue,DERIVED FROM:.metadata.annotations.scheduling\.gpuplane\.io/derived-from'
echo
echo "each gang bound whole: its pods, the node and the GPUs gpuplane-scheduler chose for each (the Ray head asks for none):"
groups=$("$kubectl" get podgroups -l scheduling.gpuplane.io/derived=true -o jsonpath='{.items[*].metadata.name}')
"$kubectl" get pods -l "scheduling.gpuplane.io/pod-group in (${groups// /,})" --sort-by=.metadata.name \
	-o custom-columns='GROUP:.metadata.labels.scheduling\.gpuplane\.io/pod-group,POD:.metadata.name,NODE:.spec.nodeName,GPUS:.metadata.annotations.gpuplane\.io/gpus'

qnode=gpu-node-5
section "a GPU falls off the bus: $qnode's GPU 3 is quarantined, reset, revalidated and returned"
"$bin/gpuplane" dev fault "$qnode" --gpu 3 --lose
node_view() {
	"$kubectl" get node "$qnode" -o jsonpath='  taint: {.spec.taints[?(@.key=="gpuplane.io/gpu-fault")].value}{"\n"}  GPUs allocatable: {.status.allocatable.nvidia\.com/gpu} of {.status.capacity.nvidia\.com/gpu}{"\n"}  GPUQuarantine: {.status.conditions[?(@.type=="GPUQuarantine")].reason}: {.status.conditions[?(@.type=="GPUQuarantine")].message}{"\n"}'
}
wait_quarantine() { # reason timeout-seconds
	local deadline=$((SECONDS + $2))
	until [[ $("$kubectl" get node "$qnode" -o jsonpath='{.status.conditions[?(@.type=="GPUQuarantine")].reason}') == "$1" ]]; do
		if ((SECONDS > deadline)); then
			echo "demo: $qnode's GPUQuarantine condition is not $1 after $2 s" >&2
			node_view >&2
			return 1
		fi
		sleep 0.2
	done
}
wait_quarantine GPUQuarantined 30
echo "the node is tainted NoSchedule (XID 79 affects the node) and GPU 3 is withdrawn:"
node_view
echo "the GPU is reset and must answer for 30 s (health.quarantine.validation) before it returns..."
wait_quarantine NoGPUQuarantined 120
node_view
echo "every step, as events on the Node:"
"$kubectl" get events -n default --field-selector involvedObject.kind=Node,involvedObject.name="$qnode" \
	--sort-by=.firstTimestamp -o custom-columns=REASON:.reason,MESSAGE:.message |
	grep -E '^(REASON|GPUQuarantine|GPUPod|GPUDrain|GPUReset|GPUHeld|GPURetry|GPUReturned|GPUFailedAgain)'
section "DRA: claims allocated by kube-scheduler from the agents' ResourceSlices, prepared by the same agents"
"$kubectl" get deviceclasses gpu.gpuplane.io mig.gpu.gpuplane.io mig-2g.20gb.gpu.gpuplane.io \
	-o custom-columns='DEVICECLASS:.metadata.name,EXTENDED RESOURCE:.spec.extendedResourceName'
echo "ResourceSlices per node (whole GPUs, MIG profiles at every placement of GPUs in MIG mode, shared counters):"
"$kubectl" get resourceslices -o custom-columns='NODE:.spec.nodeName,DRIVER:.spec.driver,DEVICES:.spec.devices[*].name' \
	| awk 'NR > 1 {n = split($3, d, ","); if ($3 == "<none>") n = 0; c[$1] += n} END {for (k in c) printf "  %-14s %d devices\n", k, c[k]}' | sort
"$kubectl" apply -f examples/dra/ >/dev/null
deadline=$((SECONDS + 90))
until [[ $("$kubectl" get pods dra-h100 dra-dynamic-mig dra-shared-a dra-shared-b dra-extended-mig -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' 2>/dev/null | grep -c Running) -ge 5 ]]; do
	if ((SECONDS > deadline)); then
		echo "the DRA pods did not all run:" >&2
		"$kubectl" get pods dra-h100 dra-dynamic-mig dra-shared-a dra-shared-b dra-extended-mig -o wide >&2
		"$kubectl" get events --field-selector reason=FailedPrepareDynamicResources >&2
		exit 1
	fi
	sleep 1
done
echo "each claim's device (dra-h100 by CEL on productName; dra-dynamic-mig a 2g.20gb MIG device created for it; dra-shared-a/b one claim;"
echo "dra-extended-mig asked for nvidia.com/mig-2g.20gb as for the device plugin and was served through DRA):"
for p in dra-h100 dra-dynamic-mig dra-shared-a dra-shared-b dra-extended-mig; do
	claim=$("$kubectl" get pod "$p" -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}')
	[[ -n "$claim" ]] || claim=$("$kubectl" get pod "$p" -o jsonpath='{.spec.resourceClaims[0].resourceClaimName}')
	[[ -n "$claim" ]] || claim=$("$kubectl" get pod "$p" -o jsonpath='{.status.extendedResourceClaimStatus.resourceClaimName}')
	printf '  %-16s node %-11s claim %-28s device %s\n' "$p" "$("$kubectl" get pod "$p" -o jsonpath='{.spec.nodeName}')" "$claim" \
		"$("$kubectl" get resourceclaim "$claim" -o jsonpath='{.status.allocation.devices.results[*].device}')"
	printf '  %-16s CDI devices %s\n' "" "$("$kubectl" get pod "$p" -o jsonpath='{.metadata.annotations.gpuplane\.io/dra-claims}')"
done

section "gpuplane status"
"$bin/gpuplane" status -o wide

section "a gang inside one NVLink domain: a second cluster of two GB200 NVL72 racks, two compute trays each (examples/topology/04-nvlink-gang.yaml)"
stop_ui
"$bin/gpuplane" dev down >"$state/down-first.log" 2>&1 || { cat "$state/down-first.log" >&2; exit 1; }
"$bin/gpuplane" dev up --scheduler gpuplane --nodes 4 --profile gb200-nvl72 --topology rack-nodes=2,nvl72 --dra=false
# Each agent labels nvidia.com/gpu.clique from its simulated GPUs' fabric
# (its rack's, as on a real NVL72 rack) once it has read them.
for _ in $(seq 60); do
	[[ $("$kubectl" get nodes -l nvidia.com/gpu.clique --no-headers 2>/dev/null | wc -l) -eq 4 ]] && break
	sleep 1
done
"$kubectl" get nodes -L gpuplane.io/topology-block,gpuplane.io/topology-rack,nvidia.com/gpu.clique
start_ui
echo "gpu-node-1 (rack-1) is busy: only rack-2 has two free trays for the two 4-GPU workers"
"$kubectl" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: busy-tray
spec:
  schedulerName: gpuplane-scheduler
  nodeSelector:
    kubernetes.io/hostname: gpu-node-1
  containers:
  - name: work
    image: registry.k8s.io/pause:3.10
    resources:
      limits:
        nvidia.com/gpu: 4
YAML
"$kubectl" wait --for=jsonpath='{.status.phase}'=Running pod/busy-tray --timeout=60s >/dev/null
"$kubectl" apply -f examples/topology/04-nvlink-gang.yaml
if ! "$kubectl" wait --for=jsonpath='{.status.phase}'=Running pods -l job-name=nvlink-train --timeout=90s >/dev/null; then
	echo "demo: the NVLink gang did not start within 90 s" >&2
	"$bin/gpuplane" status >&2
	exit 1
fi
for p in $("$kubectl" get pods -l job-name=nvlink-train -o jsonpath='{.items[*].metadata.name}'); do
	node=$("$kubectl" get pod "$p" -o jsonpath='{.spec.nodeName}')
	printf '  %-22s -> %-10s %s  nvidia.com/gpu.clique=%s\n' "$p" "$node" \
		"$("$kubectl" get node "$node" -o jsonpath='{.metadata.labels.gpuplane\.io/topology-rack}')" \
		"$("$kubectl" get node "$node" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.clique}')"
done

section "GPU nodes that follow demand: a third cluster with no GPU node, and Karpenter (kwok provider) with a NodePool of DGX H100s that idle 10 s"
"$bin/gpuplane" dev down >"$state/down-second.log" 2>&1 || { cat "$state/down-second.log" >&2; exit 1; }
"$bin/gpuplane" dev up --scheduler gpuplane --nodes 0 --karpenter-pools h100x8=dgxh100 --karpenter-idle 10s --dra=false
"$kubectl" get nodepool gpu-h100x8 -o jsonpath='{"the pool'"'"'s nodes are made with: "}{.spec.template.metadata.labels}{"\n"}'
"$kubectl" apply -f - >/dev/null <<'YAML'
apiVersion: scheduling.gpuplane.io/v1alpha1
kind: Queue
metadata:
  name: capped
spec:
  resources:
  - name: nvidia.com/gpu
    limit: "0"
---
apiVersion: v1
kind: Pod
metadata:
  name: over-quota
  labels:
    scheduling.gpuplane.io/queue: capped
spec:
  schedulerName: gpuplane-scheduler
  containers:
  - name: work
    image: registry.k8s.io/pause:3.10
    resources:
      limits:
        nvidia.com/gpu: 8
---
apiVersion: scheduling.gpuplane.io/v1alpha1
kind: PodGroup
metadata:
  name: train
spec:
  minMember: 4
YAML
for i in 0 1 2 3; do
	"$kubectl" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: train-$i
  labels:
    scheduling.gpuplane.io/pod-group: train
spec:
  schedulerName: gpuplane-scheduler
  containers:
  - name: worker
    image: registry.k8s.io/pause:3.10
    resources:
      limits:
        nvidia.com/gpu: 8
YAML
done
echo "a gang of 4 pods x 8 GPUs and a pod over its queue's quota; no node yet"
if ! "$kubectl" wait --for=jsonpath='{.status.phase}'=Running pods -l scheduling.gpuplane.io/pod-group=train --timeout=180s >/dev/null; then
	echo "demo: Karpenter's nodes did not run the gang within 180 s" >&2
	"$kubectl" get nodeclaims >&2 || true
	exit 1
fi
"$kubectl" get nodeclaims -o custom-columns=NODECLAIM:.metadata.name,TYPE:.metadata.labels.node\.kubernetes\.io/instance-type,NODE:.status.nodeName
"$kubectl" get pods -o custom-columns=POD:.metadata.name,NODE:.spec.nodeName,DO-NOT-DISRUPT:.metadata.annotations.karpenter\.sh/do-not-disrupt
echo "the gang ends; the pool goes back to zero nodes after its idle time"
"$kubectl" delete pods -l scheduling.gpuplane.io/pod-group=train --grace-period=0 >/dev/null
for _ in $(seq 120); do
	[[ $("$kubectl" get nodes -l karpenter.sh/nodepool --no-headers 2>/dev/null | wc -l) -eq 0 ]] && break
	sleep 1
done
echo "nodes left in the pool: $("$kubectl" get nodes -l karpenter.sh/nodepool --no-headers 2>/dev/null | wc -l)"

printf '\n== demo finished in %.1f s (before stopping the cluster)\n' "$(echo "$(date +%s.%N) - $start" | bc)"
