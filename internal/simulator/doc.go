// Package simulator replays cluster traces through the scheduling core on a
// virtual clock and measures the outcome: the FGD paper's packing
// experiment (pods placed once in arrival order, never leaving) and an
// event mode (arrivals, departures, queues, gangs, preemption). It reads the
// Alibaba openb CSV trace and a small YAML format of our own, and writes
// tables, CSV and a hand-made SVG plot.
//
// It must not make scheduling decisions of its own: every placement,
// bind and eviction comes from packages placement and scheduler, so what
// the simulator measures is what the Kubernetes adapter would do. It never
// reads the wall clock for simulated time.
package simulator
