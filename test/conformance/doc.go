// Package conformance holds tests that drive gpuplane's device plugin through
// the kubelet's own device-manager code over real unix sockets, against the
// simulated GPU backend. The kubelet's manager always uses
// /var/lib/kubelet/device-plugins, so the tests re-run themselves in a
// private mount namespace with a tmpfs over /var/lib; where that is not
// possible they skip and say why. It has no code of its own to ship.
package conformance
