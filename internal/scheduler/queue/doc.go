// Package queue holds the queue hierarchy of the scheduler: validation
// (no cycles, no child quota above its parent's), usage accounting up the
// tree, limits, and hierarchical weighted fair shares computed by water
// filling: each queue first gets what it wants up to its guaranteed quota,
// then idle capacity is shared among siblings that want more in proportion
// to their weights for that resource (borrowing), never above a queue's
// limit.
//
// It must not place pods or choose victims; the cycle in package scheduler
// asks it whether a queue may grow and how far it is from its fair share
// and its guarantee.
package queue
