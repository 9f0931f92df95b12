// Package build holds fluent builders of the API objects that unit and
// integration tests create: Pod, Node, Queue and PodGroup, each started
// by a constructor and finished by Obj, which returns a copy:
//
//	build.Pod("ns", "p").GPUs(2).Label(v1alpha1.QueueLabel, "team").Obj()
//
// A builder sets only what its methods say; defaults that belong to one
// setting (kwok's taint, the scheduler's name) are presets of the tests
// that need them. It is imported by tests only.
package build
