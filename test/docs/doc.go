// Package docs tests gpuplane's documentation: the README and every page
// under docs/. Its tests parse the Markdown and check that every relative
// link and anchor resolves, that every page is reachable from the README,
// that every reason gpuplane writes has its troubleshooting entry, that
// every YAML block means what it says (Kubernetes objects applied to a real
// control plane with a server-side dry run; Helm values rendered with the
// chart; agent, mig-parted and simulated-node files loaded by gpuplane's
// own parsers), and that every shell block runs, unless a comment beside it
// says what it needs that a test does not have.
//
// A block's marker is an HTML comment on the line right before its opening
// fence or right after its closing fence:
//
//	<!-- needs: real cluster -->          a shell block that needs a cluster with GPUs
//	<!-- needs: GPU node -->              one that needs a node with the NVIDIA driver
//	<!-- needs: local cluster -->         one that needs `gpuplane dev up` (covered by make demo and test/integration/dev)
//	<!-- needs: make target -->           one that runs a make target: the demo, a test tier, a benchmark
//	<!-- needs: benchmark -->             a benchmark's command (docs/benchmarks.md has its numbers)
//	<!-- needs: openb trace -->           one that reads ../shared/traces
//	<!-- needs: long-running process -->  one that starts a process that runs until stopped
//	<!-- needs: published release -->     one that fetches a released version (go install ...@latest)
//	<!-- needs: interactive shell -->     one that sets up a user's own shell (completion)
//	<!-- yaml: helm values -->            values for deploy/helm/gpuplane
//	<!-- yaml: agent config -->           gpuplane-agent's config file (api/config/v1)
//	<!-- yaml: mig-parted config -->      a MIG config in mig-parted's format
//	<!-- yaml: simulated profile -->      a simulated node's profile file
//	<!-- yaml: fragment -->               part of a larger object: parsed only
//	<!-- yaml: other: WHAT -->            another project's file gpuplane does not read: parsed only
//
// It must not be imported; it has only tests.
package docs
