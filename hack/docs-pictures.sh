#!/usr/bin/env bash
# Regenerates docs/images/gpuplane-status.svg from a real `gpuplane status`:
# a local cluster of four simulated DGX H100 nodes (whole GPUs, MIG, time-
# slicing, whole GPUs), two teams' queues and the project's examples, then
# `gpuplane status` drawn as a terminal picture. `make docs-pictures` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$PWD/bin"
state=$(mktemp -d)
export GPUPLANE_DEV_DIR="$state/dev" GPUPLANE_CONTROLPLANE_BIN="$bin"
kubectl="$bin/kubectl"
trap '"$bin/gpuplane" dev down >/dev/null 2>&1 || true; rm -rf "$state"' EXIT

"$bin/gpuplane" dev up --scheduler gpuplane --dra=false \
	--node-profiles dgxh100,dgxh100:mig-mixed,dgxh100:time-slicing=4,dgxh100
export KUBECONFIG="$state/dev/kubeconfig"
"$kubectl" apply -f examples/queues/01-queues.yaml
"$kubectl" apply -f examples/01-gpu-pod.yaml -f examples/04-multi-gpu-pod.yaml -f examples/08-mig-pod.yaml \
	-f examples/fractions/01-fractional-pods.yaml -f examples/queues/03-team-a-training-gang.yaml
# Wait until the scheduler has placed what fits and said why of the rest.
for _ in $(seq 60); do
	pending=$("$kubectl" get pods -A --field-selector=status.phase=Pending -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].reason}{"\n"}{end}' | grep -c '^$' || true)
	[[ "$pending" == 0 ]] && break
	sleep 1
done
"$bin/gpuplane" status | go run ./hack/textsvg -command "gpuplane status" > docs/images/gpuplane-status.svg
echo "wrote docs/images/gpuplane-status.svg"
