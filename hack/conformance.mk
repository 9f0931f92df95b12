# Conformance tests: gpuplane's device plugin driven by the kubelet's own
# device-manager code, and its DRA driver driven by the kubelet's own DRA
# manager and plugin manager (k8s.io/kubernetes v1.36.3), against the
# simulated backend. The DRA tests read ResourceClaims from a real
# kube-apiserver (etcd and kube-apiserver from bin/, built by
# controlplane-bins). The differential test (test/conformance/differential)
# compares gpuplane-scheduler's feasible nodes with kube-scheduler's own
# Filter plugins on random clusters. They live in their own module, test/conformance. The
# first build compiles part of k8s.io/kubernetes and takes several minutes on
# 2 cores.
GO ?= go
BIN ?= $(CURDIR)/bin
.PHONY: test-conformance
test-conformance: controlplane-bins ## device plugin and DRA driver conformance against the kubelet's device manager and DRA manager
	cd test/conformance && GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN="$(BIN)" $(GO) test -race -count=1 ./...
