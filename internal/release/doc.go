// Package release builds gpuplane's release artifacts into one directory
// (`make release`, hack/release):
//
//   - the CLI for linux and darwin, amd64 and arm64, each a tar.gz of the
//     binary with LICENSE and README.md, built without cgo and stamped
//     with the version (internal/version);
//   - a CycloneDX SBOM (github.com/CycloneDX/cyclonedx-go) of the three
//     binaries, made from the module lists the Go toolchain records in
//     them (debug/buildinfo);
//   - the container images (internal/imagebuild), one OCI image layout
//     archive per image;
//   - a krew plugin manifest for `kubectl gpuplane`, with the archives'
//     SHA-256;
//   - checksums.txt, the SHA-256 of every other file, as sha256sum prints
//     them.
//
// Archives are written reproducibly: one commit and version give the same
// bytes.
package release
