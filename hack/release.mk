# Release artifacts (internal/release, hack/release). Included by the
# top-level Makefile, after hack/images.mk, whose image settings it reuses.
#
#   make release       into dist/ (git-ignored): the CLI's archives for
#                      linux and darwin, amd64 and arm64; a CycloneDX SBOM;
#                      the images as OCI archives; a krew manifest; and
#                      checksums.txt. VERSION (git describe) names them.
#   make test-release  build the release without the images, for the host
#                      and darwin/arm64, into a temporary directory and check
#                      it (the images tier checks the images); build each
#                      binary with a plain go build and run it

RELEASE_OUT ?= dist

.PHONY: release test-release

release: images-cross-cc ## release artifacts into dist/: CLI archives (linux, darwin; amd64, arm64), checksums, SBOM, images as OCI archives, krew manifest (VERSION)
	$(GO) run ./hack/release --out $(RELEASE_OUT) --version $(VERSION) --commit "$(BUILD_COMMIT)" --date "$(BUILD_DATE)" \
		--images --registry $(REGISTRY) --image-platforms $(PLATFORMS) --work-dir $(BIN)/.images

test-release: ## build the release (without images) into a temporary directory and check archives, checksums, SBOM and krew manifest; build each binary with a plain go build and run it
	GPUPLANE_RELEASE_TEST=1 $(GO) test -count=1 -timeout 60m ./internal/release/
