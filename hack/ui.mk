# The web view's browser tests and benchmarks, included by the top-level
# Makefile. The browser tests (test/integration/ui) run under
# test-integration, which installs the browser first (browser-tools).
#
#   make browser-tools        install Debian's chromium when it is missing
#                             (first time only)
#   make docs-ui-screenshots  redraw docs/images/ui-*.png from the browser
#                             test against a dev cluster (about 3 minutes)
#   make bench-ui             the web view's numbers for docs/benchmarks.md

GO ?= go
BIN ?= $(CURDIR)/bin
CHROMIUM ?= chromium

.PHONY: browser-tools docs-ui-screenshots bench-ui

browser-tools: ## install Debian's chromium for the browser tests if it is missing
	@if command -v $(CHROMIUM) >/dev/null; then \
		echo "chromium is installed"; \
	else \
		echo "installing Debian's chromium package"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; \
	fi

docs-ui-screenshots: controlplane-bins browser-tools ## redraw the web view's screenshots in docs/images from the browser test against a dev cluster
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" GPUPLANE_UI_SCREENSHOTS="$(CURDIR)/docs/images" \
		$(GO) test -count=1 -run TestWebUI -v ./test/integration/ui/

bench-ui: browser-tools ## the web view's memory at 5,000 nodes and 40,000 pods and its first paint in Chromium (docs/benchmarks.md)
	GPUPLANE_INTEGRATION=1 $(GO) test -count=1 -run '^$$' -bench BenchmarkUIMemory5000Nodes40000Pods -benchtime 1x -count 3 ./test/integration/ui/
	GPUPLANE_INTEGRATION=1 $(GO) test -count=1 -run '^$$' -bench BenchmarkFirstPaint -benchtime 3x ./test/integration/ui/
	GPUPLANE_INTEGRATION=1 $(GO) test -count=1 -run '^$$' -bench BenchmarkRebuildAfterOneChange5000Nodes -benchtime 10x -count 3 ./test/integration/ui/
