#!/usr/bin/env bash
# Builds the control-plane binaries pinned in tools/go.mod (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok, kubectl) into one directory, named the way
# controller-runtime's envtest expects them, so that directory also serves as
# KUBEBUILDER_ASSETS.
#
# The binaries are rebuilt only when the pins change: a stamp file beside them
# records a hash of tools/go.mod and tools/go.sum. The first build compiles
# thousands of packages and takes many minutes on a small machine; progress is
# printed while it runs.
#
# Usage: hack/build-controlplane.sh [BIN_DIR]
# Environment:
#   TOOLS_DIR        the module whose pins are built (default: tools; the
#                    compatibility tier's tools/k8s-<minor> pin another
#                    Kubernetes release)
#   TARGETS          the binaries to build, by name (default: all six)
#   GO               go command (default: go)
#   BUILD_PARALLEL   go build -p value (default: 2; the machine is shared)
#   PROGRESS_EVERY   seconds between progress lines (default: 20)
#   FORCE=1          rebuild even when the stamp matches
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${TOOLS_DIR:-${repo_root}/tools}"
bin_dir="${1:-${repo_root}/bin}"
GO="${GO:-go}"
BUILD_PARALLEL="${BUILD_PARALLEL:-2}"
PROGRESS_EVERY="${PROGRESS_EVERY:-20}"
stamp="${bin_dir}/.controlplane-pins"

# name:package pairs, built in this order (later ones reuse the build cache of
# the earlier ones: kube-apiserver compiles most of what the others need).
all_targets=(
	"etcd:go.etcd.io/etcd/server/v3"
	"kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver"
	"kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager"
	"kwok:sigs.k8s.io/kwok/cmd/kwok"
	"kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler"
	"kubectl:k8s.io/kubernetes/cmd/kubectl"
)
targets=()
for t in "${all_targets[@]}"; do
	if [[ -z "${TARGETS:-}" || " ${TARGETS} " == *" ${t%%:*} "* ]]; then
		targets+=("${t}")
	fi
done

die() {
	echo "controlplane-bins: $*" >&2
	exit 1
}

command -v "${GO}" >/dev/null 2>&1 || die "go command '${GO}' not found: install Go 1.26 or set GO"
[[ -f "${tools_dir}/go.mod" ]] || die "missing ${tools_dir}/go.mod"
((${#targets[@]} > 0)) || die "TARGETS=${TARGETS:-} names none of: ${all_targets[*]%%:*}"
builds() { [[ " ${targets[*]%%:*} " == *" $1 "* ]]; }

mkdir -p "${bin_dir}"
# One build at a time: make test builds the control plane in one lane while
# the monitoring tier's prerequisites may ask for it in the other; the
# second waits here, then finds it built.
exec 9>"${bin_dir}/.controlplane-build.lock"
if ! flock -n 9; then
	echo "controlplane-bins: another build of the control plane is running; waiting for it"
	flock 9
fi

module_version() {
	# Prints the version tools/go.mod selects for module $1.
	(cd "${tools_dir}" && GOWORK=off GOFLAGS=-mod=mod "${GO}" list -m -f '{{.Version}}' "$1")
}

pin_hash() {
	{
		cat "${tools_dir}/go.mod" "${tools_dir}/go.sum"
		printf '%s\n' "${targets[@]}"
	} | sha256sum | cut -c1-16
}

want="$(pin_hash)"
have=""
[[ -f "${stamp}" ]] && have="$(head -n1 "${stamp}")"

all_present=1
for t in "${targets[@]}"; do
	[[ -x "${bin_dir}/${t%%:*}" ]] || all_present=0
done

if [[ "${FORCE:-0}" != 1 && "${have}" == "${want}" && ${all_present} == 1 ]]; then
	echo "controlplane-bins: ${bin_dir} is up to date (pins ${want})"
	exit 0
fi
if [[ -n "${have}" && "${have}" != "${want}" ]]; then
	echo "controlplane-bins: ${bin_dir} holds binaries built from other pins (${have}, tools/go.mod now gives ${want}): rebuilding all of them"
	rm -f "${stamp}"
elif [[ -z "${have}" ]]; then
	echo "controlplane-bins: no control-plane binaries in ${bin_dir} yet: building them (the first build takes many minutes)"
fi

k8s_version="$(module_version k8s.io/kubernetes)"
k8s_minor="$(echo "${k8s_version}" | cut -d. -f2)"
k8s_ldflags="-s -w
 -X k8s.io/component-base/version.gitVersion=${k8s_version}
 -X k8s.io/component-base/version.gitMajor=1
 -X k8s.io/component-base/version.gitMinor=${k8s_minor}
 -X k8s.io/component-base/version.gitTreeState=clean"

mkdir -p "${bin_dir}"
work="$(mktemp -d "${bin_dir}/.build.XXXXXX")"
build_pid=""
cleanup() {
	if [[ -n "${build_pid}" ]] && kill -0 "${build_pid}" 2>/dev/null; then
		kill "${build_pid}" 2>/dev/null || true
		wait "${build_pid}" 2>/dev/null || true
	fi
	rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

overall_start=${SECONDS}
i=0
for t in "${targets[@]}"; do
	i=$((i + 1))
	name="${t%%:*}"
	pkg="${t#*:}"
	ldflags="-s -w"
	case "${pkg}" in
	k8s.io/kubernetes/*) ldflags="${k8s_ldflags}" ;;
	esac

	total="$(cd "${tools_dir}" && GOWORK=off "${GO}" list -deps "${pkg}" 2>/dev/null | wc -l || true)"
	echo "controlplane-bins: [${i}/${#targets[@]}] building ${name} from ${pkg} (${total} packages in its build graph; cached ones are skipped)"
	log="${work}/${name}.log"
	start=${SECONDS}
	(
		cd "${tools_dir}"
		# CGO is off: none of these components needs it, and so no C compiler is needed.
		GOWORK=off CGO_ENABLED=0 exec "${GO}" build -v -p "${BUILD_PARALLEL}" -trimpath \
			-ldflags "${ldflags}" -o "${work}/${name}" "${pkg}"
	) >"${log}" 2>&1 &
	build_pid=$!
	last=${SECONDS}
	while kill -0 "${build_pid}" 2>/dev/null; do
		sleep 1
		if ((SECONDS - last >= PROGRESS_EVERY)); then
			last=${SECONDS}
			done_pkgs="$(grep -c -v '^#' "${log}" || true)"
			echo "controlplane-bins:       ${name}: ${done_pkgs} packages compiled so far, $(fmt_secs $((SECONDS - start))) elapsed"
		fi
	done
	rc=0
	wait "${build_pid}" || rc=$?
	build_pid=""
	if ((rc != 0)); then
		echo "controlplane-bins: building ${name} failed (exit ${rc}); last lines of the build log:" >&2
		grep -v '^[a-zA-Z0-9._/-]*$' "${log}" | tail -n 30 >&2 || tail -n 30 "${log}" >&2
		exit 1
	fi
	# Each binary goes in place as soon as it is built; the stamp, written
	# only when all are, is what marks the directory complete.
	mv -f "${work}/${name}" "${bin_dir}/${name}"
	echo "controlplane-bins:       ${name} built in $(fmt_secs $((SECONDS - start)))"
done

# kwok reads its node and pod lifecycles ("stages") from configuration; the ones
# its authors ship live in its module under kustomize/stage. They are copied
# next to the binary so that a launcher finds the stages of the kwok it runs.
if builds kwok; then
	kwok_dir="$(cd "${tools_dir}" && GOWORK=off "${GO}" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
	[[ -d "${kwok_dir}/kustomize/stage" ]] || die "kwok module at ${kwok_dir} has no kustomize/stage directory"
	mkdir -p "${work}/kwok-stages"
	(cd "${kwok_dir}/kustomize/stage" && find . -name testdata -prune -o -name '*.yaml' ! -name kustomization.yaml -print) |
		while read -r f; do
			mkdir -p "${work}/kwok-stages/$(dirname "${f}")"
			cp "${kwok_dir}/kustomize/stage/${f}" "${work}/kwok-stages/${f}"
		done
	chmod -R u+w "${work}/kwok-stages"

	rm -rf "${bin_dir}/kwok-stages"
	mv "${work}/kwok-stages" "${bin_dir}/kwok-stages"
fi
{
	echo "${want}"
	echo "kubernetes ${k8s_version}"
	if builds etcd; then echo "etcd $(module_version go.etcd.io/etcd/server/v3)"; fi
	if builds kwok; then echo "kwok $(module_version sigs.k8s.io/kwok)"; fi
} >"${stamp}"
echo "controlplane-bins: all ${#targets[@]} binaries ready in ${bin_dir} after $(fmt_secs $((SECONDS - overall_start))) (pins ${want})"
