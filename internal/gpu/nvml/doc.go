// Package nvml is gpuplane's GPU backend for real nodes: it implements
// gpu.Backend on NVIDIA's management library through go-nvml, which loads
// libnvidia-ml.so.1 at run time.
//
// Two rules keep a node agent alive on machines where the driver is
// missing or broken. Open turns every Init failure into one error that says
// what is missing and how to fix it (wrapping gpu.ErrNoDriver when the
// library itself is absent). And after a failed Init the library is never
// called again: go-nvml resolves symbols lazily, so the first call into an
// unloaded library ends the process with a symbol lookup error.
//
// This package holds no policy: it translates NVML's answers into the
// types of package gpu and its return codes into gpu's sentinel errors.
package nvml
