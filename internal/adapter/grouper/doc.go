// Package grouper gives gpuplane-scheduler the gangs of workloads that never
// wrote a PodGroup. For a pending pod that names no group, it walks the pod's
// owner chain (bounded, through the API server's discovery mapping) to the
// workload at its top, evaluates the GroupingRule in force for that kind
// (a GroupingRule object, else a shipped rule of defaults.yaml; both are CEL
// compiled once, rules.go), creates the PodGroup the rule derives and labels
// the pod with it. Volcano's and the Workload API's group references are
// read as written (volcano.go). A rule may split one workload into several
// groups (split.go).
//
// Decisions are cached per owner, so a large job costs one walk; a pod waits
// (Grouper.Awaiting) while its group is worked out, and an error holds it
// with an event on the workload naming the rule's field.
//
// The package decides only which pods belong together and how many of them
// must start at once (minMember, with where that came from): never where or
// whether a group runs, which is the scheduling core's.
package grouper
