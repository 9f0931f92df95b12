#!/usr/bin/env bash
# Runs fuzz targets for FUZZTIME each: make test-fuzz (hack/fuzz.mk).
#
# FUZZ_ALL lists every target as package:FuzzName; FUZZ_TARGETS the ones to
# run. A Fuzz function in a _test.go file outside test/ that FUZZ_ALL does not
# list fails the run. A package may be in a test module of its own under test/
# (./test/conformance/differential): it is built in its module.
#
# Each package's fuzz-instrumented test binary is built once (go test -c
# -fuzz) and runs each of the package's targets, in the package's directory,
# with the flags `go test -fuzz` gives it: the same corpus (testdata/fuzz),
# the same cache of interesting inputs (GOCACHE/fuzz/<import path>), the same
# default timeout, but linked once for all of the package's targets rather
# than once per target.
#
# Go before 1.27 can end a time-bounded run with a bare "context deadline
# exceeded" as FUZZTIME runs out (go.dev/issue/75804): the coordinator's
# deadline fires while a worker is mid-input, on loaded machines often. Such
# a run used its whole FUZZTIME and wrote no failing input; Go 1.27 reports
# the same run as a pass, and so does this script. Any other failure fails:
# a failing input, a panic, a hung worker, or a failure line besides the
# deadline.
set -euo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-8s}
FUZZ_ALL=${FUZZ_ALL:?FUZZ_ALL lists the fuzz targets (hack/fuzz.mk)}
FUZZ_TARGETS=${FUZZ_TARGETS:-$FUZZ_ALL}

cd "$(dirname "$0")/.."

all=" $(echo $FUZZ_ALL) "
missing=$(git grep -n '^func Fuzz[A-Za-z0-9_]*(' -- '*_test.go' ':!test/' |
	sed -E 's|^([^:]*)/[^/:]*:[0-9]+:func (Fuzz[A-Za-z0-9_]*)\(.*|./\1:\2|' |
	while read -r t; do
		case $all in *" $t "*) ;; *) echo "$t" ;; esac
	done)
if [ -n "$missing" ]; then
	echo "fuzz targets not listed in hack/fuzz.mk FUZZ_TARGETS (add them there):"
	echo "$missing"
	exit 1
fi

# Targets grouped by package, packages in the order of their first target.
declare -A names=()
pkgs=()
for t in $FUZZ_TARGETS; do
	pkg=${t%%:*}
	[ -n "${names[$pkg]+x}" ] || pkgs+=("$pkg")
	names[$pkg]+="${t##*:} "
done
[ ${#pkgs[@]} -gt 0 ] || exit 0

fuzzcache="$("$GO" env GOCACHE)/fuzz"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out
# go test puts GOROOT/bin first on a test's PATH; so does this script.
goroot_bin="$("$GO" env GOROOT)/bin"

# A package may be in the product module or in a test module of its own
# under test/ (test/conformance): its module is the nearest directory above
# it with a go.mod, and go commands about it run there.
declare -A modof=() seenmod=()
mods=()
for pkg in "${pkgs[@]}"; do
	d=${pkg#./}
	while [ "$d" != . ] && [ ! -f "$d/go.mod" ]; do d=$(dirname "$d"); done
	[ -n "${seenmod[$d]+x}" ] || mods+=("$d")
	seenmod[$d]=1
	modof[$pkg]=$d
done

# Each package's import path (its cache directory), from one go list per
# module, by its ./path.
declare -A importpath=()
for mod in "${mods[@]}"; do
	rel=()
	for pkg in "${pkgs[@]}"; do
		if [ "${modof[$pkg]}" = "$mod" ]; then
			rel+=("./$(realpath -m --relative-to="$mod" "${pkg#./}")")
		fi
	done
	list=$(cd "$mod" && "$GO" list -f '{{.ImportPath}} {{.Dir}}' "${rel[@]}")
	while read -r ip d; do
		importpath[./${d#"$PWD"/}]=$ip
	done <<<"$list"
done

for pkg in "${pkgs[@]}"; do
	[ -n "${importpath[$pkg]:-}" ] || { echo "fuzz: $pkg is not a ./path of a package in this repository's modules"; exit 1; }
	dir=$PWD/${pkg#./}
	bin=$tmp/fuzz.test
	echo "fuzz: building $pkg's instrumented test binary"
	# Linked as go test links the binaries it runs: without DWARF and symbol table.
	(cd "${modof[$pkg]}" && "$GO" test -c -fuzz=. -ldflags='-s -w' -o "$bin" "./$(realpath -m --relative-to=. "$dir")")
	for name in ${names[$pkg]}; do
		echo "fuzz: $name in $pkg for $FUZZTIME"
		start=$SECONDS
		rc=0
		(cd "$dir" && PWD=$dir PATH=$goroot_bin:$PATH exec "$bin" \
			-test.paniconexit0 -test.timeout=10m0s \
			-test.fuzzcachedir="$fuzzcache/${importpath[$pkg]}" \
			-test.run='^$' -test.fuzz="^$name\$" -test.fuzztime="$FUZZTIME") >"$out" 2>&1 || rc=$?
		cat "$out"
		if [ $rc -eq 0 ]; then
			echo "ok  	${importpath[$pkg]}	$name	$((SECONDS - start))s"
			continue
		fi
		if [ "$(grep -c -e '^--- FAIL' -e '^    ' "$out")" = 2 ] && grep -q "^--- FAIL: $name (" "$out" &&
			grep -qx '    context deadline exceeded' "$out" &&
			! grep -q -e 'Failing input written' -e 'panic:' -e 'hung or terminated' "$out"; then
			echo "fuzz: $name ran its $FUZZTIME and stopped on Go's fuzztime deadline race (go.dev/issue/75804, fixed in Go 1.27) with no failing input: a pass"
			continue
		fi
		echo "FAIL	${importpath[$pkg]}	$name	$((SECONDS - start))s"
		exit $rc
	done
	rm -f "$bin"
done
