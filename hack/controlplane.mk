# Control-plane binaries and the integration tier. Included from the Makefile;
# uses its GO, BIN and GOTESTFLAGS when set.
GO ?= go
BIN ?= $(CURDIR)/bin
GOTESTFLAGS ?= -race -count=1
# Modest parallelism: the first build compiles thousands of packages and the
# machines are shared.
CONTROLPLANE_BUILD_PARALLEL ?= 2
INTEGRATION_PKGS ?= ./test/integration/...

.PHONY: compat-bins test-compat controlplane-bins operator-bins demo-operator-bins third-party-crds test-integration

# The workload operators `make demo` runs: a first demo builds only these.
DEMO_OPERATORS ?= training-operator kuberay karpenter

controlplane-bins: ## build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kubectl into bin/ (only when tools/go.mod changes)
	@GO="$(GO)" BUILD_PARALLEL="$(CONTROLPLANE_BUILD_PARALLEL)" $(CURDIR)/hack/build-controlplane.sh "$(BIN)"

operator-bins: ## build the workload operators the integration tests run (JobSet, training-operator, KubeRay, LeaderWorkerSet, Trainer) into bin/operators (only when tools/operators/*/go.mod changes)
	@GO="$(GO)" BUILD_PARALLEL="$(CONTROLPLANE_BUILD_PARALLEL)" $(CURDIR)/hack/build-operators.sh "$(BIN)"

demo-operator-bins: ## build only the operators the demo runs ($(DEMO_OPERATORS)) into bin/operators
	@GO="$(GO)" BUILD_PARALLEL="$(CONTROLPLANE_BUILD_PARALLEL)" $(CURDIR)/hack/build-operators.sh "$(BIN)" $(DEMO_OPERATORS)

third-party-crds: $(CONTROLLER_GEN) ## copy the CRDs tests install from other projects' Go modules (Volcano's PodGroup and Job, Kueue's Topology) into bin/crds (only when a pin changes)
	@GO="$(GO)" CONTROLLER_GEN="$(CONTROLLER_GEN)" $(CURDIR)/hack/fetch-crds.sh "$(BIN)"

test-integration: controlplane-bins operator-bins third-party-crds browser-tools ## integration tests against a real etcd, kube-apiserver, controller-manager, kwok and workload operators, and the web view in Chromium
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" $(GO) test $(GOTESTFLAGS) $(INTEGRATION_PKGS)

# The compatibility tier runs gpuplane against the oldest and the newest
# Kubernetes minor it supports. Each minor's kube-apiserver is pinned in a
# module of its own (tools/k8s-<minor>) and built into bin/k8s-<minor>;
# etcd and kwok come from controlplane-bins, and no other component is
# needed (the framework does the two things the tests need of
# kube-controller-manager: default ServiceAccounts, untainting Ready nodes).
COMPAT_KUBE_MINORS ?= 1.34 1.37
COMPAT_PKGS ?= ./test/compat/...

COMPAT_BINS := $(addprefix compat-bins-,$(COMPAT_KUBE_MINORS))
.PHONY: $(COMPAT_BINS)

compat-bins: $(COMPAT_BINS) ## build the kube-apiserver of each minor the compatibility tier tests (tools/k8s-<minor>) into bin/k8s-<minor> (only when its go.mod changes); compat-bins-<minor> builds one

$(COMPAT_BINS): compat-bins-%:
	@GO="$(GO)" BUILD_PARALLEL="$(CONTROLPLANE_BUILD_PARALLEL)" TOOLS_DIR="$(CURDIR)/tools/k8s-$*" TARGETS=kube-apiserver \
		$(CURDIR)/hack/build-controlplane.sh "$(BIN)/k8s-$*"

test-compat: controlplane-bins $(COMPAT_BINS) ## the chart's install, upgrade and uninstall, a server-side dry run, and scheduling and DRA smoke tests on the kube-apiserver of the oldest and newest supported minor (COMPAT_KUBE_MINORS, 1.34 and 1.37)
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" GPUPLANE_COMPAT_MINORS="$(COMPAT_KUBE_MINORS)" $(GO) test $(GOTESTFLAGS) $(COMPAT_PKGS)
