// Package simulator replays cluster traces through the scheduling core on a
// virtual clock and measures the outcome: the FGD paper's packing
// experiment (pods placed once in arrival order, never leaving) and an
// event mode (arrivals, departures, queues, gangs, preemption). It reads the
// Alibaba openb CSV trace and a small YAML format of our own, generates a
// contended multi-tenant workload from tables distilled out of openb,
// Philly and the Alibaba 2025 trace (contended.go, workloadtables.go), and
// writes tables, CSV and hand-made SVG plots. Event mode measures job
// completion time, queueing delay, fairness over time (fairness.go),
// preemptions, GPU-hours lost since each victim's last checkpoint and
// moves, and can run the core as other schedulers would configure it
// (configs.go): queues and placement set differently, the same core.
//
// Cost. Reading a trace, tuning it (drawing pods up to a target, or
// dropping random pods down to it through an order-statistics tree) and
// reporting are linear in the number of pods, or n log n where a sort or
// the tree is involved. Packing places each pod once, at a cost that
// follows the nodes its shape can use, not the pods already placed; event
// mode runs one scheduling cycle per distinct arrival or departure time,
// each costing what changed (internal/scheduler). A 200,000-pod trace
// packs in about a second and replays in event mode in a few
// (docs/benchmarks-scheduler.md).
//
// It must not make scheduling decisions of its own: every placement,
// bind and eviction comes from packages placement and scheduler, so what
// the simulator measures is what the Kubernetes adapter would do. The one
// exception is labelled as such: the kueue-tas topology policy
// (kueuetas.go), a baseline that follows Kueue's Topology Aware Scheduling
// to compare gpuplane against; it only chooses each gang's nodes, as
// Kueue does before kube-scheduler, and the core still places every pod.
// It never reads the wall clock for simulated time.
package simulator
