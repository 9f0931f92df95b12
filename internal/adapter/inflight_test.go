package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingTripper answers every request after release is closed (watches
// at once) and records the most requests it held at one time.
type countingTripper struct {
	mu            sync.Mutex
	now, most     int
	release       chan struct{}
	watchesServed int
}

func (c *countingTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if isWatch(req) {
		c.mu.Lock()
		c.watchesServed++
		c.mu.Unlock()
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(""))}, nil
	}
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	<-c.release
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

// Many workers' requests through two clients built from one config never
// have more than the limit in flight together, every one is answered, and
// a watch passes while the limit is taken.
func TestLimitInFlightBoundsRequestsAcrossClients(t *testing.T) {
	const limit, workers = 8, 200
	ct := &countingTripper{release: make(chan struct{})}
	wrap := limitInFlight(limit)
	clients := []http.RoundTripper{wrap(ct), wrap(ct)}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, "https://api/api/v1/namespaces/a/pods/p/binding", nil)
			resp, err := clients[i%2].RoundTrip(req)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			errs <- resp.Body.Close()
		})
	}
	// Every slot is taken while no answer is released: a watch still goes.
	watch, _ := http.NewRequest(http.MethodGet, "https://api/api/v1/pods?watch=true", nil)
	resp, err := clients[0].RoundTrip(watch)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	_ = resp.Body.Close()
	close(ct.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ct.most > limit {
		t.Errorf("%d requests in flight at once, limit %d", ct.most, limit)
	}
	if ct.most == 0 || ct.watchesServed != 1 {
		t.Errorf("most in flight %d, watches served %d: want some requests and the one watch", ct.most, ct.watchesServed)
	}
}

// A slot is held until the response body is read to the end or closed,
// not only until the response's headers: the HTTP/2 stream lasts that
// long.
func TestLimitInFlightHoldsSlotUntilBodyDone(t *testing.T) {
	ct := &countingTripper{release: make(chan struct{})}
	close(ct.release)
	rt := limitInFlight(1)(ct)
	req, _ := http.NewRequest(http.MethodGet, "https://api/api/v1/nodes/n", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	// The first body is open: a second request waits for the slot and
	// gives up with its context.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := cancelled(rt, req.WithContext(ctx)); err != nil {
		t.Fatalf("second request with the slot taken: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp2, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("after the first body was read to the end: %v", err)
	}
	_ = resp2.Body.Close()
	_ = resp.Body.Close() // closing after EOF gives back nothing twice
	resp3, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := cancelled(rt, req.WithContext(ctx)); err != nil {
		t.Fatalf("with the third body open the limit of 1 must hold: %v", err)
	}
	_ = resp3.Body.Close()
}

// cancelled says how a request whose context has ended fared when it
// should have waited for a slot: nil when it gave up with its context.
func cancelled(rt http.RoundTripper, req *http.Request) error {
	resp, err := rt.RoundTrip(req)
	if resp != nil {
		_ = resp.Body.Close()
		return errors.New("it was answered, want it to wait until its context ends")
	}
	if !errors.Is(err, context.Canceled) {
		return fmt.Errorf("got %w, want it to wait until its context ends", err)
	}
	return nil
}

// A burst on a connection no request was answered on for the gate's idle
// time goes through one request first, the rest once it is answered;
// while answers keep coming, requests go through together; after idle
// time without one, the next burst is gated again.
func TestColdGateOpensWithOneRequest(t *testing.T) {
	now := time.Unix(1000, 0)
	var clock sync.Mutex
	tick := func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	ct := &countingTripper{release: make(chan struct{})}
	g := gateCold(30*time.Second, tick)(ct).(*coldGate)
	burst := func(n int) *sync.WaitGroup {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, "https://api/api/v1/namespaces/a/pods/p/binding", nil)
				resp, err := g.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
			})
		}
		return &wg
	}
	inFlight := func() int { ct.mu.Lock(); defer ct.mu.Unlock(); return ct.now }
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: in flight %d, at the gate %d", what, inFlight(), g.waiting.Load())
			}
			runtime.Gosched()
		}
	}

	wg := burst(20)
	poll("one request in flight and 19 at the gate", func() bool { return inFlight() == 1 && g.waiting.Load() == 19 })
	close(ct.release)
	wg.Wait()
	if ct.most != 1 {
		t.Errorf("%d requests in flight at once on a cold connection, want 1", ct.most)
	}

	ct.release = make(chan struct{})
	clock.Lock()
	now = now.Add(29 * time.Second)
	clock.Unlock()
	wg = burst(20)
	poll("20 requests in flight on a warm connection", func() bool { return inFlight() == 20 })
	close(ct.release)
	wg.Wait()

	ct.release = make(chan struct{})
	clock.Lock()
	now = now.Add(31 * time.Second)
	clock.Unlock()
	wg = burst(5)
	poll("one request in flight and 4 at the gate after idle time", func() bool { return inFlight() == 1 && g.waiting.Load() == 4 })
	close(ct.release)
	wg.Wait()
}
