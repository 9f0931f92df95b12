#!/usr/bin/env bash
# Runs make's test tiers in lanes side by side: make test (Makefile).
#
# Usage: hack/tiers.sh LANE...
# A LANE is a quoted list of tiers run one after another; the lanes run at
# the same time. A tier is [nice:]NAME=TARGET[+TARGET...], the make targets
# it runs in order, e.g. "unit=test-unit nice:fuzz=test-fuzz"
# "monitoring=monitoring-tools+test-monitoring". A nice: tier runs at
# niceness TIER_NICE (default 10): CPU-bound work that should take only the
# cores the other lanes leave idle.
#
# Each tier's output goes to TIER_LOGS/NAME.log (default bin/test-logs) and
# is printed whole when the tier ends, so lanes never interleave their
# lines. A failing tier stops no other: a tier that needs what a failed one
# builds fails on its own make prerequisites, which the Go build cache makes
# quick to retry. At the end a table gives each tier's result and wall time,
# and the exit status is 1 if a tier failed, naming it.
#
# Environment: MAKE (default make), TIER_LOGS, TIER_NICE.
set -euo pipefail

MAKE=${MAKE:-make}
TIER_NICE=${TIER_NICE:-10}
cd "$(dirname "$0")/.."
logs=${TIER_LOGS:-bin/test-logs}
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.result "$logs"/.print-lock

fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# run_lane SPEC: runs the tiers of one lane, writing NAME.result for each
# ("ok SECONDS" or "FAIL SECONDS").
run_lane() {
	local tier name targets start rc nice
	for tier in $1; do
		nice=
		case $tier in nice:*) tier=${tier#nice:} nice="nice -n $TIER_NICE" ;; esac
		name=${tier%%=*}
		targets=${tier#*=}
		echo "tiers: $name started ($(date -u +%T))${nice:+, at niceness $TIER_NICE}"
		start=$SECONDS
		rc=0
		$nice $MAKE --no-print-directory ${targets//+/ } </dev/null >"$logs/$name.log" 2>&1 || rc=$?
		local took=$((SECONDS - start)) result=ok
		[ $rc -eq 0 ] || result=FAIL
		echo "$result $took" >"$logs/$name.result"
		# One lane prints at a time: a tier's log stays in one piece.
		{
			flock 9
			echo "==== tier $name: $result in $(fmt $took) (exit $rc; log $logs/$name.log) ===="
			cat "$logs/$name.log"
			echo "==== end of tier $name ===="
		} 9>>"$logs/.print-lock"
	done
}

set -m # each lane in a process group of its own, so an interrupt can end it whole
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done; exit 130' INT TERM
total_start=$SECONDS
for lane in "$@"; do
	run_lane "$lane" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
trap - INT TERM

failed=()
echo
printf '%-17s %-8s %s\n' tier result "wall time"
for lane in "$@"; do
	for tier in $lane; do
		tier=${tier#nice:}
		name=${tier%%=*}
		read -r result took 2>/dev/null <"$logs/$name.result" || result=missing
		if [ "$result" = missing ]; then
			printf '%-17s %-8s %s\n' "$name" "$result" -
		else
			printf '%-17s %-8s %s\n' "$name" "$result" "$(fmt "$took")"
		fi
		[ "$result" = ok ] || failed+=("$name")
	done
done
printf '%-17s %-8s %s\n' "make test" "" "$(fmt $((SECONDS - total_start)))"
if [ ${#failed[@]} -gt 0 ]; then
	echo "tiers failed: ${failed[*]} (logs in $logs)"
	exit 1
fi
