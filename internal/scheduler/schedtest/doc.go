// Package schedtest is the scheduler's test harness: fluent builders for
// clusters, queues and pod groups, and a Harness that runs scheduling
// cycles, records every decision, and applies binds and evictions to its
// snapshot the way the Kubernetes adapter would (evicted groups go back to
// pending). Tests in any package may use it; production code must not.
package schedtest
