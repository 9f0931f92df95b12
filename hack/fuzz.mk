# Fuzz targets of every parser of cluster input and of files, each run for a
# bounded time by `make test`. Included from the Makefile; uses its GO. The
# runner is hack/fuzz.sh: one instrumented test binary per package, each
# target run from it for FUZZTIME, and Go 1.26's fuzztime deadline race
# (go.dev/issue/75804) with no failing input counted as a pass.
GO ?= go
FUZZTIME ?= 8s
# package:target, one per parser. A new parser of untrusted input adds its
# fuzz target here; test-fuzz fails on a Fuzz function missing from the list.
# The last, in the test module test/conformance, draws random clusters from
# the fuzzer's input and compares gpuplane-scheduler's feasible nodes with
# kube-scheduler's Filter plugins (test/conformance/differential).
# FUZZ_TARGETS picks a subset to run (make test-fuzz FUZZ_TARGETS=./api/gpunode:FuzzParseTopology).
FUZZ_ALL := \
	./api/buildinfo:FuzzParse \
	./api/config/v1:FuzzLoad \
	./api/gpunode:FuzzParseTopology \
	./api/gpunode:FuzzParseOffer \
	./api/gpunode:FuzzParseLabels \
	./api/gpunode:FuzzParseQuarantine \
	./api/gpunode:FuzzParseMIGLayout \
	./api/gpunode:FuzzParseMIGProposal \
	./api/gpunode:FuzzParseGPUAPI \
	./api/gpupod:FuzzReadAllocation \
	./api/gpupod:FuzzParseGPUs \
	./api/gpupod:FuzzReadFraction \
	./api/scheduling/v1alpha1:FuzzParseLastCheckpoint \
	./api/scheduling/v1alpha1:FuzzParseMinRuntime \
	./internal/adapter:FuzzConvertNode \
	./internal/adapter:FuzzPodRequest \
	./internal/adapter:FuzzNodeAndPodResources \
	./internal/adapter:FuzzParseShares \
	./internal/adapter:FuzzQueueAndPodGroup \
	./internal/adapter:FuzzDRASliceAndClaim \
	./internal/adapter:FuzzDRAMIGSlices \
	./internal/simulator:FuzzParseOpenBNodes \
	./internal/simulator:FuzzParseOpenBPods \
	./internal/simulator:FuzzReadYAMLTrace \
	./internal/simulator:FuzzParsePhillyRunTimes \
	./internal/simulator:FuzzParseAlibabaGPU2025 \
	./internal/gpu/sim:FuzzParse \
	./internal/gpu/sim:FuzzParseFabric \
	./internal/mig:FuzzParse \
	./internal/gpu/sim:FuzzParseState \
	./internal/cli/cost:FuzzDecode \
	./api/scheduling/v1alpha1:FuzzParseMovable \
	./api/scheduling/v1alpha1:FuzzPodMembership \
	./api/scheduling/v1alpha1:FuzzTopologyAnnotations \
	./internal/adapter/grouper:FuzzRuleEval \
	./internal/adapter/grouper:FuzzFromVolcano \
	./internal/adapter/grouper:FuzzVolcanoTopology \
	./internal/adapter:FuzzTopologyResolve \
	./api/dra:FuzzDecodeConfig \
	./internal/dra:FuzzDecodeCheckpoint \
	./internal/gomem:FuzzCgroupLimit \
	./test/conformance/differential:FuzzDifferential
FUZZ_TARGETS ?= $(FUZZ_ALL)

.PHONY: test-fuzz

test-fuzz: ## run each fuzz target for FUZZTIME (default 8s): parsers of Nodes, pods, Queues, PodGroups, traces, profiles
	@GO="$(GO)" FUZZTIME="$(FUZZTIME)" FUZZ_ALL="$(FUZZ_ALL)" FUZZ_TARGETS="$(FUZZ_TARGETS)" $(CURDIR)/hack/fuzz.sh
