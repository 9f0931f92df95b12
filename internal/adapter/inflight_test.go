package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
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
