# Fuzz targets of every parser of cluster input and of files, each run for a
# bounded time by `make test`. Included from the Makefile; uses its GO.
# Go before 1.27 can end a time-bounded run with a bare "context deadline
# exceeded" as FUZZTIME runs out (go.dev/issue/75804): the coordinator's
# deadline fires while a worker is mid-input, on loaded machines often. Such
# a run used its whole FUZZTIME and wrote no failing input; Go 1.27 reports
# the same run as a pass, and so does test-fuzz. Any other failure fails: a
# failing input, a panic, a hung worker, or a failure line besides the
# deadline.
GO ?= go
FUZZTIME ?= 8s
# package:target, one per parser. A new parser of untrusted input adds its
# fuzz target here; test-fuzz fails on a Fuzz function missing from the list.
# FUZZ_TARGETS picks a subset to run (make test-fuzz FUZZ_TARGETS=./api/gpunode:FuzzParseTopology).
FUZZ_ALL := \
	./api/config/v1:FuzzLoad \
	./api/gpunode:FuzzParseTopology \
	./api/gpunode:FuzzParseLabels \
	./api/gpunode:FuzzParseQuarantine \
	./api/gpunode:FuzzParseMIGLayout \
	./api/gpunode:FuzzParseMIGProposal \
	./api/gpunode:FuzzParseGPUAPI \
	./api/gpupod:FuzzReadAllocation \
	./api/gpupod:FuzzParseGPUs \
	./api/gpupod:FuzzReadFraction \
	./internal/adapter:FuzzConvertNode \
	./internal/adapter:FuzzPodRequest \
	./internal/adapter:FuzzParseShares \
	./internal/adapter:FuzzQueueAndPodGroup \
	./internal/adapter:FuzzDRASliceAndClaim \
	./internal/adapter:FuzzDRAMIGSlices \
	./internal/simulator:FuzzParseOpenBNodes \
	./internal/simulator:FuzzParseOpenBPods \
	./internal/simulator:FuzzReadYAMLTrace \
	./internal/gpu/sim:FuzzParse \
	./internal/mig:FuzzParse \
	./internal/gpu/sim:FuzzParseState \
	./internal/cli/cost:FuzzDecode \
	./api/scheduling/v1alpha1:FuzzPodMembership \
	./internal/adapter/grouper:FuzzRuleEval \
	./internal/adapter/grouper:FuzzFromVolcano \
	./api/dra:FuzzDecodeConfig \
	./internal/dra:FuzzDecodeCheckpoint \
	./internal/gomem:FuzzCgroupLimit
FUZZ_TARGETS ?= $(FUZZ_ALL)

.PHONY: test-fuzz

test-fuzz: ## run each fuzz target for FUZZTIME (default 8s): parsers of Nodes, pods, Queues, PodGroups, traces, profiles
	@missing=$$(git grep -n '^func Fuzz[A-Za-z0-9_]*(' -- '*_test.go' ':!test/' | \
		sed -E 's|^([^:]*)/[^/:]*:[0-9]+:func (Fuzz[A-Za-z0-9_]*)\(.*|./\1:\2|' | \
		while read -r t; do case " $(FUZZ_ALL) " in *" $$t "*) ;; *) echo "$$t";; esac; done); \
		[ -z "$$missing" ] || { echo "fuzz targets not listed in hack/fuzz.mk FUZZ_TARGETS (add them there):"; echo "$$missing"; exit 1; }
	@set -e; out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz: $$name in $$pkg for $(FUZZTIME)"; \
		rc=0; $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg >$$out 2>&1 || rc=$$?; \
		cat $$out; \
		[ $$rc -eq 0 ] && continue; \
		if [ "$$(grep -c -e '^--- FAIL' -e '^    ' $$out)" = 2 ] && grep -q "^--- FAIL: $$name (" $$out && grep -qx '    context deadline exceeded' $$out && \
			! grep -q -e 'Failing input written' -e 'panic:' -e 'hung or terminated' $$out; then \
			echo "fuzz: $$name ran its $(FUZZTIME) and stopped on Go's fuzztime deadline race (go.dev/issue/75804, fixed in Go 1.27) with no failing input: a pass"; \
			continue; \
		fi; \
		exit $$rc; \
	done
