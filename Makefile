# gpuplane build entry points. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
CONTROLLER_GEN_VERSION := v0.21.0
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOTESTFLAGS ?= -race -count=1
# go-nvml's cgo preamble declares deprecated NVML calls; their warnings are noise.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
COMMANDS := gpuplane gpuplane-agent gpuplane-scheduler
# Every binary is stamped with its build (internal/version): VERSION from
# git describe (v0.0.0-<commit> before the first tag), the commit, and the
# commit's date, so that one commit gives one binary.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo "v0.0.0-$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)")
BUILD_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
BUILD_DATE := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
VERSION_LDFLAGS := -X github.com/gpuplane/gpuplane/internal/version.version=$(VERSION) -X github.com/gpuplane/gpuplane/internal/version.commit=$(BUILD_COMMIT) -X github.com/gpuplane/gpuplane/internal/version.date=$(BUILD_DATE)

.PHONY: help build test test-unit test-docs lint verify generate manifests docs docs-pictures demo bench clean

# Each test tier beyond the unit tests keeps its targets in a fragment of its own.
include hack/controlplane.mk hack/conformance.mk hack/monitoring.mk hack/agent.mk hack/scheduler.mk hack/fuzz.mk hack/images.mk hack/release.mk hack/ui.mk

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

build: ## build the gpuplane binaries into bin/
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ $(addprefix ./cmd/,$(COMMANDS))

# The unit tier is every package of the product module outside test/: the
# packages under test/ start real components and run in their own tiers.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v '^github.com/gpuplane/gpuplane/test/')

# make test runs the tiers in two lanes side by side (hack/tiers.sh). The
# first lane builds the control plane when its pins change, then runs the
# tiers that start API servers and spend much of their time waiting on them;
# the second builds the workload operators the integration tier needs (that
# tier waits for them if they are not ready), then runs the others, fuzz and
# images at a lower priority (nice) so that they take the cores the first
# lane leaves idle. The compatibility tier's two kube-apiservers are built
# in the first lane, after integration, which ends well before the second
# lane on a cold run. Each tier's output is printed whole when it ends; a table
# of wall times ends the run. TEST_TIERS_EXTRA adds tiers to the second lane.
TEST_TIERS_EXTRA ?=
TEST_LANES = \
	"controlplane-bins=controlplane-bins+third-party-crds conformance=test-conformance integration=test-integration docs=test-docs compat-bins=compat-bins compat=test-compat" \
	"operator-bins=operator-bins unit=test-unit monitoring=monitoring-tools+test-monitoring nice:fuzz=test-fuzz nice:images=test-images nice:release=test-release $(TEST_TIERS_EXTRA)"

test: ## every test tier, none needing a GPU: unit, fuzz, conformance, integration, docs, compatibility (Kubernetes 1.34 and 1.37), monitoring, images, release (two lanes at once; a table of wall times at the end)
	@MAKE="$(MAKE)" $(CURDIR)/hack/tiers.sh $(TEST_LANES)

test-unit: ## unit tests of the product module, with the race detector
	$(GO) test $(GOTESTFLAGS) $(UNIT_PKGS)

test-docs: controlplane-bins third-party-crds ## the docs: links and anchors, every YAML block applied to a real control plane (server-side dry run) or loaded by its parser, every shell block run or marked
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" $(GO) test $(GOTESTFLAGS) ./test/docs/

$(GOLANGCI_LINT):
	@mkdir -p $(BIN)
	@echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into bin/ (first time only)"
	GOBIN=$(BIN)/.golangci-$(GOLANGCI_LINT_VERSION) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv $(BIN)/.golangci-$(GOLANGCI_LINT_VERSION)/golangci-lint $@ && rmdir $(BIN)/.golangci-$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT) ## golangci-lint v2 with the project's rules (.golangci.yml)
	$(GOLANGCI_LINT) run ./...

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	@echo "installing controller-gen $(CONTROLLER_GEN_VERSION) into bin/ (first time only)"
	GOBIN=$(BIN)/.controller-gen-$(CONTROLLER_GEN_VERSION) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	@mv $(BIN)/.controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen $@ && rmdir $(BIN)/.controller-gen-$(CONTROLLER_GEN_VERSION)

generate: $(CONTROLLER_GEN) ## regenerate deep-copy code and CRD manifests from api/, then the manifests from the chart, then the docs' reference
	$(CONTROLLER_GEN) object paths=./api/scheduling/...
	$(CONTROLLER_GEN) crd paths=./api/scheduling/... output:crd:artifacts:config=deploy/crds
	@$(MAKE) --no-print-directory manifests
	@$(MAKE) --no-print-directory docs

docs: ## regenerate docs/reference (the CLI, the scheduler's flags, the CRD API, labels and annotations, conditions and events, metrics) and the simulator's plot
	$(GO) test ./internal/docgen ./cmd/gpuplane-scheduler ./cmd/gpuplane-agent -count=1 -run TestReferenceIsCurrent -update

docs-pictures: build controlplane-bins ## redraw docs/images/gpuplane-status.svg from a real gpuplane status on a local cluster (about 2 minutes)
	hack/docs-pictures.sh

manifests: ## render deploy/agent, deploy/scheduler and deploy/admission from the Helm chart (deploy/helm/gpuplane), copy the CRDs and monitoring files into it, write its README from values.yaml
	$(GO) test ./deploy/helm -count=1 -run 'TestManifestsAreRendered|TestChartREADME' -update

verify: generate ## fail when formatting, go.mod or generated files are stale
	@test -z "$$(git status --porcelain -- api deploy docs/reference docs/images)" || { git status --short -- api deploy docs/reference docs/images; echo "generated files are stale: run 'make generate' and commit them"; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) mod tidy -diff
	cd test/conformance && $(GO) mod tidy -diff
	$(GO) vet ./...

demo: build controlplane-bins demo-operator-bins ## a local cluster of simulated DGX H100 nodes running the agent: examples/ scheduled, allocations, labels, metrics, a PyTorchJob and a RayCluster gang-scheduled; then GB200 NVL72 racks and a gang inside one NVLink domain
	hack/demo.sh

bench: ## Go benchmarks of the product module's packages (results and the other benchmark targets: docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem $(UNIT_PKGS)

clean: ## remove built binaries
	rm -rf $(BIN)
