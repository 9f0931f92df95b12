package nodesim

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestAdmissionOrder(t *testing.T) {
	o := newAdmissionOrder()
	pod := func(uid string) *corev1.Pod { return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}} }
	for _, uid := range []string{"a", "b", "c"} {
		o.arrive(pod(uid))
	}
	o.arrive(pod("a")) // seen again: keeps its place
	admitted := make(chan string, 3)
	admit := func(uid string) {
		o.wait(context.Background(), types.UID(uid))
		admitted <- uid
		o.done(types.UID(uid))
	}
	go admit("c")
	go admit("b")
	time.Sleep(50 * time.Millisecond) // c and b are waiting for a
	select {
	case uid := <-admitted:
		t.Fatalf("%s admitted before a", uid)
	default:
	}
	go admit("a")
	for _, want := range []string{"a", "b", "c"} {
		if got := <-admitted; got != want {
			t.Fatalf("admitted %s, want %s next", got, want)
		}
	}
	// A pod whose predecessor never comes waits maxTurnWait at most.
	o.arrive(pod("stuck"))
	o.arrive(pod("next"))
	start := time.Now()
	o.wait(context.Background(), "next")
	if waited := time.Since(start); waited < maxTurnWait/2 || waited > 3*maxTurnWait {
		t.Fatalf("waited %v behind a pod that never comes, want about %v", waited, maxTurnWait)
	}
}
