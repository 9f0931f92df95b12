# Container images, built from Go without a container engine
# (internal/imagebuild, hack/images). Included by the top-level Makefile.
#
#   make images        the images of gpuplane-agent, gpuplane-scheduler and
#                      gpuplane for linux/amd64 and linux/arm64, as an OCI
#                      layout in _output/images (one index per image)
#   make push          push them: REGISTRY=... VERSION=... (docker config
#                      credentials)
#   make test-images   build the linux/amd64 images twice (same digests),
#                      unpack each and run its entrypoint chrooted in it
#
# The agent links the C library; its image carries Debian's (libc6,
# libc6-arm64-cross), fetched with apt-get download into bin/.images. The arm64 cgo builds need Debian's gcc-aarch64-linux-gnu,
# which `make images` installs when it is missing.

GO ?= go
BIN ?= $(CURDIR)/bin
REGISTRY ?= ghcr.io/gpuplane
# VERSION (the Makefile's, from git describe) tags the images and is
# stamped into their binaries with the commit and its time.
VERSION ?= v0.0.0-unknown
PLATFORMS ?= linux/amd64,linux/arm64
IMAGES_OUT ?= _output/images
# The commit's time stamps every file, so one commit gives one digest.
IMAGES_EPOCH := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGES_REVISION := $(shell git rev-parse HEAD 2>/dev/null)

.PHONY: images push test-images images-cross-cc

images-cross-cc:
	@if [[ "$(PLATFORMS)" == *linux/arm64* ]] && [ "$$(go env GOARCH)" != arm64 ] && ! command -v aarch64-linux-gnu-gcc >/dev/null; then \
		echo "installing Debian's gcc-aarch64-linux-gnu for the arm64 cgo builds"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross; \
	fi

images: images-cross-cc ## OCI images of the agent, scheduler and CLI for linux/amd64 and arm64 into _output/images (REGISTRY, VERSION, PLATFORMS)
	$(GO) run ./hack/images build --out $(IMAGES_OUT) --registry $(REGISTRY) --version $(VERSION) \
		--platforms $(PLATFORMS) --epoch $(IMAGES_EPOCH) --revision "$(IMAGES_REVISION)" --work-dir $(BIN)/.images

push: ## push the images of `make images` to REGISTRY with tag VERSION
	$(GO) run ./hack/images push --layout $(IMAGES_OUT) --registry $(REGISTRY) --version $(VERSION)

test-images: ## build the amd64 images, run each entrypoint inside its unpacked image, check digests repeat
	GPUPLANE_IMAGE_TEST=1 GPUPLANE_IMAGE_WORK_DIR=$(BIN)/.images $(GO) test -count=1 -timeout 30m -run 'TestImagesRun|TestLayerIsDeterministic' ./internal/imagebuild/
