# gpuplane-scheduler's benchmarks against kube-scheduler, included by the
# top-level Makefile. The scheduler's integration tests
# (test/integration/scheduler) run under test-integration, and so do
# test/integration/schedulerscale's TestSchedulerPerfSmoke (the harness of
# bench-scheduler-perf at 10 nodes) and TestStartWithBacklogBesideBoundPods;
# its benchmarks run only with -bench.
#
#   make bench-scheduler-scale   gpuplane-scheduler against kube-scheduler on one
#                                API server: SCALE_NODES kwok nodes x 8 GPUs,
#                                8 single-GPU pods per node created at once, the
#                                same waiting before the scheduler starts, then
#                                gangs of 8 (results: docs/benchmarks.md,
#                                "Scheduler at scale"). About 12 minutes at
#                                1,000 nodes and two hours at 5,000 on 2 cores;
#                                SCALE_ROUNDS=backlog runs the backlog rounds
#                                only (both schedulers, every pod bound).
#                                GPUPLANE_BENCH_GPUPLANE_BINS=a=bin1,b=bin2,...
#                                in the environment compares gpuplane-scheduler
#                                builds instead, round by round in that order,
#                                without kube-scheduler.

GO ?= go
BIN ?= $(CURDIR)/bin
SCALE_NODES ?= 1000
# SCALE_ROUNDS picks rounds by kind: burst, backlog, gang (default all).
SCALE_ROUNDS ?=

.PHONY: bench-scheduler-scale

bench-scheduler-scale: controlplane-bins ## gpuplane-scheduler vs kube-scheduler: throughput and creation-to-binding latency at scale
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" GPUPLANE_BENCH_NODES=$(SCALE_NODES) GPUPLANE_BENCH_ROUNDS=$(SCALE_ROUNDS) $(GO) test -run '^$$' \
		-bench BenchmarkSchedulerAtScale -benchtime 1x -timeout 180m ./test/integration/schedulerscale/

# make bench-dra-scale   pods with one-GPU ResourceClaims (from a template) on
#                        SCALE_NODES kwok nodes with no device-plugin GPUs,
#                        each publishing 8 GPUs in a ResourceSlice of
#                        gpu.gpuplane.io: gpuplane-scheduler against
#                        kube-scheduler's DynamicResources plugin in one run,
#                        DRA_ROUNDS rounds each (results: docs/benchmarks.md,
#                        "ResourceClaims at scale"). About 30 minutes at
#                        1,000 nodes on a loaded 2-core machine.
DRA_ROUNDS ?= 3

.PHONY: bench-dra-scale

bench-dra-scale: controlplane-bins ## gpuplane-scheduler vs kube-scheduler: pods with one-GPU ResourceClaims per second at scale
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" GPUPLANE_BENCH_NODES=$(SCALE_NODES) GPUPLANE_BENCH_DRA_ROUNDS=$(DRA_ROUNDS) $(GO) test -run '^$$' \
		-bench BenchmarkDRAClaimsAtScale -benchtime 1x -timeout 180m ./test/integration/schedulerscale/

# make bench-job-gangs   an Indexed Job of 8 workers x 8 GPUs, as users submit
#                        it (no PodGroup), under each scheduler on JOB_NODES
#                        kwok nodes: time to all workers bound, and two such
#                        jobs on 12 free nodes (kube-scheduler may deadlock
#                        them). About 3 minutes.
JOB_NODES ?= 100

.PHONY: bench-job-gangs

bench-job-gangs: controlplane-bins ## a training Job's gang under gpuplane-scheduler vs kube-scheduler: time to start, and the two-job deadlock
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" GPUPLANE_BENCH_JOB_NODES=$(JOB_NODES) $(GO) test -run '^$$' \
		-bench BenchmarkJobGangs -benchtime 1x -timeout 30m ./test/integration/schedulerscale/

# make bench-pytorchjob-gangs   the same rounds with the workload issue #15
#                               names: a PyTorchJob of 8 x 8 GPUs (a master
#                               and 7 workers) made into pods by Kubeflow's
#                               training operator (built into bin/operators
#                               first), five runs (-count 5) for medians.
#                               About 10 minutes.

.PHONY: bench-pytorchjob-gangs

bench-pytorchjob-gangs: controlplane-bins ## a PyTorchJob's gang through the training operator under gpuplane-scheduler vs kube-scheduler: time to start, the two-job deadlock, 5 runs
	@GO="$(GO)" $(CURDIR)/hack/build-operators.sh "$(BIN)" training-operator
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" GPUPLANE_BENCH_JOB_NODES=$(JOB_NODES) $(GO) test -run '^$$' \
		-bench BenchmarkPyTorchJobGangs -benchtime 1x -count 5 -timeout 60m ./test/integration/schedulerscale/

# make bench-scheduler-perf   kube-scheduler's own benchmark workloads
#                             (scheduler_perf: SchedulingBasic, the pod
#                             affinity and anti-affinity ones, topology
#                             spreading, node affinity, Unschedulable, and
#                             SchedulingPodAffinityZones: pod affinity over
#                             three zones, where it can be broken) on
#                             PERF_NODES kwok nodes of upstream's node
#                             template, kube-scheduler and gpuplane-scheduler
#                             in the same run, PERF_ROUNDS rounds each, every
#                             round's outcome checked (results:
#                             docs/benchmarks.md, "kube-scheduler's own
#                             workloads"). PERF_WORKLOADS picks workloads by
#                             name (comma-separated; default all). About 3
#                             minutes a workload at 500 nodes and 3 rounds on
#                             a loaded 2-core machine (a workload stops at its
#                             first failed round).
PERF_NODES ?= 500
PERF_ROUNDS ?= 3
PERF_WORKLOADS ?=

.PHONY: bench-scheduler-perf

bench-scheduler-perf: controlplane-bins ## kube-scheduler's scheduler_perf workloads under both schedulers: pods/s, each outcome checked
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" GPUPLANE_BENCH_PERF_NODES=$(PERF_NODES) GPUPLANE_BENCH_PERF_ROUNDS=$(PERF_ROUNDS) \
		GPUPLANE_BENCH_PERF_WORKLOADS="$(PERF_WORKLOADS)" $(GO) test -run '^$$' \
		-bench BenchmarkSchedulerPerf -benchtime 1x -timeout 180m ./test/integration/schedulerscale/
