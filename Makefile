# gpuplane build entry points. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
GOTESTFLAGS ?= -race -count=1
# go-nvml's cgo preamble declares deprecated NVML calls; their warnings are noise.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
COMMANDS := gpuplane gpuplane-agent gpuplane-scheduler

.PHONY: help build test test-unit lint verify demo bench clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build the gpuplane binaries into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(COMMANDS))

test: test-unit ## run every test tier that needs no GPU (unit, conformance, integration)

test-unit: ## unit tests of the product module, with the race detector
	$(GO) test $(GOTESTFLAGS) ./...

$(GOLANGCI_LINT):
	@mkdir -p $(BIN)
	@echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into bin/ (first time only)"
	GOBIN=$(BIN)/.golangci-$(GOLANGCI_LINT_VERSION) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv $(BIN)/.golangci-$(GOLANGCI_LINT_VERSION)/golangci-lint $@ && rmdir $(BIN)/.golangci-$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT) ## golangci-lint v2 with the project's rules (.golangci.yml)
	$(GOLANGCI_LINT) run ./...

verify: ## fail when formatting, go.mod or generated files are stale
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) mod tidy -diff
	$(GO) vet ./...

demo: build ## run gpuplane on a simulated DGX H100
	$(BIN)/gpuplane-agent inventory --simulate dgxh100

bench: ## Go benchmarks of the hardware layer (results: docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/gpu/...

clean: ## remove built binaries
	rm -rf $(BIN)
