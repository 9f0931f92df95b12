package adapter

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// inFlightLimit bounds the scheduler's API requests in flight, watches
// aside, so that they fit the one HTTP/2 connection client-go keeps to the
// API server. kube-apiserver lets a connection carry 100 streams unless
// --http2-max-streams-per-connection says otherwise; Go's HTTP/2 client
// meets a full connection by dialing another, each a TLS handshake on both
// sides. The bind workers alone (768 by default, so that a claim's three
// calls keep their throughput) would otherwise hold several connections
// open and keep dialing more. Requests past the limit wait for a slot on
// the connection already open instead.
type inFlightLimit struct {
	slots chan struct{}
	next  http.RoundTripper
}

// limitInFlight returns a wrapper of round trippers under which at most n
// requests, watches aside, are in flight at once across every round
// tripper it wraps: the clients built from one rest.Config share one
// connection, so they share the limit. A request holds its slot until its
// response body is closed or read to the end, as its HTTP/2 stream lives
// that long.
func limitInFlight(n int) func(http.RoundTripper) http.RoundTripper {
	slots := make(chan struct{}, n)
	return func(rt http.RoundTripper) http.RoundTripper { return &inFlightLimit{slots: slots, next: rt} }
}

func (l *inFlightLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	// A watch holds its stream for as long as it lasts: bounding it with
	// the short requests would let the informers starve the binds, or the
	// binds the informers. It is one of the few streams the limit leaves.
	if isWatch(req) {
		return l.next.RoundTrip(req)
	}
	select {
	case l.slots <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	release := sync.OnceFunc(func() { <-l.slots })
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		release()
		return resp, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// isWatch says whether req is a watch (client-go sends watch=true).
func isWatch(req *http.Request) bool {
	switch req.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return false
}

// releasingBody gives back its request's slot once read to the end or
// closed, whichever comes first.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// coldGate lets one request at a time through a connection that may have
// been closed: one on which no request was answered for idle (less than
// the transport's idle timeout, after which an unused connection is
// closed). Go's HTTP/2 client meets a burst on a closed connection with a
// dial, a TLS handshake on both sides, per request; through the gate the
// first request opens one connection and the rest of the burst then
// shares it. The bind connections need it (Config.BindConnections): they
// carry nothing between bursts of binds, unlike the shared one, which its
// watches keep open.
type coldGate struct {
	next http.RoundTripper
	idle time.Duration
	now  func() time.Time
	// last is when a request was last answered (UnixNano); mu is held by
	// the request that opens the connection.
	last    atomic.Int64
	mu      sync.Mutex
	waiting atomic.Int32 // requests waiting for mu, for tests
}

// gateCold returns a wrapper of a round tripper under a coldGate.
func gateCold(idle time.Duration, now func() time.Time) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return &coldGate{next: rt, idle: idle, now: now} }
}

func (g *coldGate) warm() bool { return g.now().UnixNano()-g.last.Load() < int64(g.idle) }

func (g *coldGate) RoundTrip(req *http.Request) (*http.Response, error) {
	if !g.warm() {
		g.waiting.Add(1)
		g.mu.Lock()
		g.waiting.Add(-1)
		if g.warm() {
			// Opened while this one waited.
			g.mu.Unlock()
		} else {
			defer g.mu.Unlock()
		}
	}
	resp, err := g.next.RoundTrip(req)
	if err == nil {
		g.last.Store(g.now().UnixNano())
	}
	return resp, err
}
