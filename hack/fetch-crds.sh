#!/usr/bin/env bash
# Copies CustomResourceDefinitions the integration tests install, but that
# ship in another project's Go module with no operator of theirs to run,
# into BIN_DIR/crds/<name>/, from the module at a pinned version through the
# Go module proxy. A CRD is fetched again only when its pin changes (a stamp
# file records it); nothing of it is committed.
#
# A module that ships API types but no CRD manifest has its CRDs generated
# from the types with controller-gen (an entry whose files start with gen:,
# naming the type packages), as its own project generates them.
#
# Usage: hack/fetch-crds.sh [BIN_DIR]
# Environment: GO (default go), CONTROLLER_GEN (for gen: entries), FORCE=1
# to fetch again.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${1:-${repo_root}/bin}/crds"
GO="${GO:-go}"

# name|module@version|CRD files inside the module (space-separated)
crds=(
	# Volcano's PodGroup, which pods migrating from Volcano name with the
	# annotation scheduling.k8s.io/group-name. v1.10.0 is served by the
	# module proxy here (v1.11.2, v1.12.1 and v1.13.0 answer 403).
	"volcano|volcano.sh/volcano@v1.10.0|config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml"
	# Kueue's Topology (v1beta1 and v1beta2), which gpuplane-scheduler reads
	# as its own: the topology tests.
	"kueue|sigs.k8s.io/kueue@v0.17.0|config/components/crd/bases/kueue.x-k8s.io_topologies.yaml"
	# Volcano's PodGroup and Job with spec.networkTopology (Volcano 1.11 and
	# later), generated from the types of volcano.sh/apis v1.12.1, the
	# newest API module served here: the topology tests.
	"volcano-apis|volcano.sh/apis@v1.12.1|gen:./pkg/apis/scheduling/v1beta1 ./pkg/apis/batch/v1alpha1"
)

mkdir -p "${bin_dir}"
for entry in "${crds[@]}"; do
	IFS='|' read -r name modver files <<<"${entry}"
	dest="${bin_dir}/${name}"
	stamp="${dest}/.pin"
	if [[ -z "${FORCE:-}" && -f "${stamp}" && "$(cat "${stamp}")" == "${modver}" ]]; then
		continue
	fi
	echo "third-party-crds: fetching ${name} CRDs from ${modver}"
	# Outside any module, so that no go.mod is touched.
	tmp="$(mktemp -d)"
	json="$(cd "${tmp}" && GOWORK=off GOFLAGS= "${GO}" mod download -json "${modver}")" || { rm -rf "${tmp}"; echo "${json:-}" >&2; exit 1; }
	rm -rf "${tmp}"
	src="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"${json}")"
	[[ -n "${src}" && -d "${src}" ]] || { echo "third-party-crds: no module directory for ${modver}:" >&2; echo "${json}" >&2; exit 1; }
	rm -rf "${dest}"
	mkdir -p "${dest}"
	if [[ "${files}" == gen:* ]]; then
		[[ -x "${CONTROLLER_GEN:-}" ]] || { echo "third-party-crds: ${name} is generated: set CONTROLLER_GEN (make third-party-crds does)" >&2; exit 1; }
		# In a writable copy: loading the packages may touch go.sum.
		work="$(mktemp -d)"
		cp -r "${src}/." "${work}/" && chmod -R u+w "${work}"
		paths=()
		for p in ${files#gen:}; do paths+=("paths=${p}"); done
		(cd "${work}" && GOWORK=off GOFLAGS=-mod=mod "${CONTROLLER_GEN}" crd "${paths[@]}" "output:crd:dir=${dest}") || { rm -rf "${work}"; exit 1; }
		rm -rf "${work}"
	else
		for f in ${files}; do
			cp "${src}/${f}" "${dest}/"
		done
	fi
	chmod u+w "${dest}/"*.yaml
	echo "${modver}" >"${stamp}"
done
