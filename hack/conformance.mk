# Conformance tests: gpuplane's device plugin driven by the kubelet's own
# device-manager code (k8s.io/kubernetes v1.36.3) against the simulated
# backend. They live in their own module, test/conformance. The first build
# compiles part of k8s.io/kubernetes and takes several minutes on 2 cores.
GO ?= go
.PHONY: test-conformance
test-conformance: ## device plugin conformance against the kubelet's device manager
	cd test/conformance && $(GO) test -race -count=1 ./...
