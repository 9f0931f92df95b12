// Package version says which build the running binary is: the version,
// commit and date that `make build`, `make images` and `make release`
// stamp with -ldflags -X (LDFlags), and, where a binary was built without
// them (`go build`, `go install ...@v0.1.0`), what the Go toolchain
// recorded in it (runtime/debug.ReadBuildInfo): the module version, the
// VCS revision and time. The Go and k8s.io/client-go versions always come
// from the build info.
//
// It must stay light: all three binaries link it.
package version
