# Monitoring checks, included by the top-level Makefile.
#
#   make test-monitoring   promtool check rules + promtool test rules on
#                          deploy/monitoring, then the Prometheus tests in
#                          test/prometheus (promtool lint of the golden
#                          /metrics, a real Prometheus scraping a simulated
#                          node and a real gpuplane-scheduler on a real
#                          control plane, every dashboard query against
#                          them)
#   make monitoring-tools  install Debian's prometheus package (server and
#                          promtool) when they are missing, for CI
#
# The Go tests install nothing and skip without the tools; this target
# fails instead, so CI cannot pass without running them.

GO ?= go
GOTESTFLAGS ?= -race -count=1
PROMTOOL ?= promtool
PROMETHEUS ?= prometheus
MONITORING_DIR := deploy/monitoring

.PHONY: test-monitoring monitoring-tools

monitoring-tools: ## install Debian's prometheus package if promtool or prometheus is missing
	@if command -v $(PROMTOOL) >/dev/null && command -v $(PROMETHEUS) >/dev/null; then \
		echo "prometheus and promtool are installed"; \
	else \
		echo "installing Debian's prometheus package"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; \
		service prometheus stop >/dev/null 2>&1 || true; \
		update-rc.d prometheus disable >/dev/null 2>&1 || true; \
	fi

test-monitoring: controlplane-bins ## alert rules (promtool check/test) and the Prometheus scrape tests
	@command -v $(PROMTOOL) >/dev/null && command -v $(PROMETHEUS) >/dev/null || { \
		echo "test-monitoring needs prometheus and promtool on PATH: run 'make monitoring-tools' (Debian's prometheus package)"; exit 1; }
	$(PROMTOOL) check rules $(MONITORING_DIR)/gpu-alerts.rules.yaml
	$(PROMTOOL) test rules $(MONITORING_DIR)/gpu-alerts.test.yaml
	$(PROMTOOL) check rules $(MONITORING_DIR)/scheduler-alerts.rules.yaml
	$(PROMTOOL) test rules $(MONITORING_DIR)/scheduler-alerts.test.yaml
	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" $(GO) test $(GOTESTFLAGS) ./test/prometheus/...
