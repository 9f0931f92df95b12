// Package schedtest is the scheduler's test harness: fluent builders for
// clusters, queues and pod groups, OnNodes and Running to hand a snapshot
// its running pods by node and read them back as one list, and a Harness
// that runs scheduling cycles, records every decision, and applies binds
// and evictions to its snapshot with model.Apply, the way the Kubernetes
// adapter would see them (evicted groups go back to pending). Tests in any
// package may use it; production code must not.
package schedtest
