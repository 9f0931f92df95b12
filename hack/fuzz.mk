# Fuzz targets of every parser of cluster input and of files, each run for a
# bounded time by `make test`. Included from the Makefile; uses its GO.
GO ?= go
FUZZTIME ?= 8s
# package:target, one per parser. A new parser of untrusted input adds its
# fuzz target here.
FUZZ_TARGETS := \
	./api/gpunode:FuzzParseTopology \
	./api/gpunode:FuzzParseLabels \
	./api/gpupod:FuzzReadAllocation \
	./api/gpupod:FuzzParseGPUs \
	./api/gpupod:FuzzReadFraction \
	./internal/scheduler/adapter:FuzzConvertNode \
	./internal/scheduler/adapter:FuzzPodRequest \
	./internal/scheduler/adapter:FuzzParseShares \
	./internal/scheduler/adapter:FuzzQueueAndPodGroup \
	./internal/simulator:FuzzParseOpenBNodes \
	./internal/simulator:FuzzParseOpenBPods \
	./internal/simulator:FuzzReadYAMLTrace \
	./internal/gpu/sim:FuzzParse

.PHONY: test-fuzz

test-fuzz: ## run each fuzz target for FUZZTIME (default 8s): parsers of Nodes, pods, Queues, PodGroups, traces, profiles
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz: $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done
