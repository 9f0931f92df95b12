# The node agent's whole-process benchmark, included by the top-level
# Makefile. The agent's integration tests (test/integration/agent) already
# run under test-integration.
#
#   make bench-agent   build gpuplane-agent and measure its resident memory
#                      with labels, metrics and the device plugin running,
#                      over 10,000 scrapes (results: docs/benchmarks-metrics.md)
#   make bench-quarantine  XID to taint on the real agent of a simulated DGX
#                      H100 against a real API server, with XID to
#                      allocatable drop as the peer (results: docs/benchmarks.md)

GO ?= go
BIN ?= $(CURDIR)/bin

.PHONY: bench-agent bench-quarantine

bench-agent: controlplane-bins ## the whole agent's RSS over 10,000 scrapes, against a real API server
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" $(GO) test -run '^$$' \
		-bench BenchmarkAgentRSSOver10000Scrapes -benchtime 1x -count 3 -benchmem ./test/integration/agent/

bench-quarantine: controlplane-bins ## XID to taint (and, as the peer, to the allocatable drop) on a simulated DGX H100's real agent: medians of 21 faults, three runs
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" $(GO) test -run '^$$' \
		-bench BenchmarkXIDToTaint -benchtime 21x -count 3 ./test/integration/quarantine/
