#!/usr/bin/env bash
# Builds the workload operators gpuplane's integration tests run as real
# processes, each from its own module under tools/operators/<name> (they want
# different Kubernetes library versions), into BIN_DIR/operators/<name>, and
# copies the CRDs that ship inside each operator's module beside it
# (BIN_DIR/operators/<name>-crds/). An operator is rebuilt only when its
# module's pins change (a stamp file records a hash of go.mod and go.sum).
#
# Usage: hack/build-operators.sh [BIN_DIR [NAME...]]
# With NAMEs, only those operators are built (`make demo` builds the two it
# runs); without, all of them.
# Environment: GO (default go), BUILD_PARALLEL (go build -p, default 2),
# FORCE=1 to rebuild. The binaries carry no DWARF or symbol table (-s -w),
# which makes their link, repeated in every fresh clone, shorter. An
# operator that needs a newer Go than the product's names the toolchain it
# is built with (GOTOOLCHAIN; the module proxy serves it, and Go fetches it
# the first time); the others are built with the Go that runs this script.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${1:-${repo_root}/bin}/operators"
GO="${GO:-go}"
BUILD_PARALLEL="${BUILD_PARALLEL:-2}"

# name|main package|module|CRD directories inside the module (comma-separated)|Go toolchain
operators=(
	"jobset|sigs.k8s.io/jobset|sigs.k8s.io/jobset|config/components/crd/bases"
	"training-operator|github.com/kubeflow/training-operator/cmd/training-operator.v1|github.com/kubeflow/training-operator|manifests/base/crds"
	"kuberay|github.com/ray-project/kuberay/ray-operator|github.com/ray-project/kuberay/ray-operator|config/crd/bases"
	"lws|sigs.k8s.io/lws/cmd|sigs.k8s.io/lws|config/crd/bases"
	"trainer|github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager|github.com/kubeflow/trainer/v2|manifests/base/crds"
	# Karpenter with its kwok cloud provider: NodePool, NodeClaim, NodeOverlay
	# and KWOKNodeClass. Karpenter v1.15 wants Go >= 1.26.9.
	"karpenter|sigs.k8s.io/karpenter/kwok|sigs.k8s.io/karpenter|kwok/charts/crds,kwok/apis/crds|go1.27.3"
)

wanted=("${@:2}")
for w in "${wanted[@]}"; do
	known=
	for entry in "${operators[@]}"; do [[ "${entry%%|*}" == "${w}" ]] && known=1; done
	[[ -n "${known}" ]] || { echo "operator-bins: unknown operator ${w}" >&2; exit 1; }
done

mkdir -p "${bin_dir}"
# One build at a time: make test builds the operators in one lane while the
# integration tier's prerequisites may ask for them in the other; the second
# waits here, then finds them built.
exec 9>"${bin_dir}/.build.lock"
if ! flock -n 9; then
	echo "operator-bins: another build of the operators is running; waiting for it"
	flock 9
fi
for entry in "${operators[@]}"; do
	IFS='|' read -r name pkg module crds toolchain <<<"${entry}"
	if ((${#wanted[@]} > 0)) && [[ " ${wanted[*]} " != *" ${name} "* ]]; then
		continue
	fi
	dir="${repo_root}/tools/operators/${name}"
	[[ -f "${dir}/go.mod" ]] || { echo "operator-bins: missing ${dir}/go.mod" >&2; exit 1; }
	want="$(cat "${dir}/go.mod" "${dir}/go.sum" | sha256sum | cut -c1-16)"
	stamp="${bin_dir}/.${name}-pins"
	if [[ -z "${FORCE:-}" && -x "${bin_dir}/${name}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
		continue
	fi
	start=$(date +%s)
	echo "operator-bins: building ${name} from ${pkg} (first time only; a minute or more)"
	goenv=(GOWORK=off GOFLAGS=-mod=mod)
	[[ -z "${toolchain}" ]] || goenv+=(GOTOOLCHAIN="${toolchain}")
	(cd "${dir}" && env "${goenv[@]}" CGO_ENABLED=0 "${GO}" build -p "${BUILD_PARALLEL}" -ldflags "-s -w" -o "${bin_dir}/${name}.tmp" "${pkg}")
	src="$(cd "${dir}" && env "${goenv[@]}" "${GO}" list -m -f '{{.Dir}}' "${module}")"
	rm -rf "${bin_dir}/${name}-crds"
	mkdir -p "${bin_dir}/${name}-crds"
	IFS=',' read -r -a crd_dirs <<<"${crds}"
	for d in "${crd_dirs[@]}"; do
		find "${src}/${d}" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml -exec cp {} "${bin_dir}/${name}-crds/" \;
	done
	chmod u+w "${bin_dir}/${name}-crds/"*.yaml
	mv "${bin_dir}/${name}.tmp" "${bin_dir}/${name}"
	# The pins as they are after the build (go may have completed go.sum).
	cat "${dir}/go.mod" "${dir}/go.sum" | sha256sum | cut -c1-16 >"${stamp}"
	echo "operator-bins: ${name} built in $(( $(date +%s) - start ))s"
done
