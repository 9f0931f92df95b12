package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/cli/cost"
	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

//go:embed assets
var assets embed.FS

// Config is what `gpuplane ui` runs with.
type Config struct {
	// Address is where the page is served: a loopback host and a port
	// (0 picks a free one).
	Address string
	// SchedulerName is the spec.schedulerName of gpuplane-scheduler.
	SchedulerName string
	// Policy is the placement policy the what-if runs the core with
	// (gpuplane-scheduler's --policy).
	Policy string
	// PoolLabels are the node labels whose value names a node's pool,
	// the first present winning.
	PoolLabels []string
	// Prometheus, when set, is where the Cost view asks for GPU-hours
	// over CostWindow, as `gpuplane cost` does.
	Prometheus string
	CostWindow string
	// Price is the price of one GPU-hour (0: no cost column).
	Price float64
	// Debounce is how long a change waits for others before the page is
	// rebuilt.
	Debounce time.Duration
	Logger   *slog.Logger
}

// Server serves the page for one cluster.
type Server struct {
	cfg     Config
	cluster *cluster
	host    string

	mu    sync.Mutex
	seq   int64
	view  *adapter.View
	state []byte
	built time.Time
	subs  map[chan []byte]struct{}

	// whatIfMu lets one what-if run at a time: each runs the core a few
	// times over the whole cluster.
	whatIfMu sync.Mutex
}

// NewServer returns a server that has read nothing yet.
func NewServer(cfg Config) (*Server, error) {
	if cfg.SchedulerName == "" {
		return nil, errors.New("ui: a scheduler name is required")
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CostWindow == "" {
		cfg.CostWindow = "7d"
	}
	if _, err := scheduler.New(scheduler.Config{Policy: cfg.Policy}); err != nil {
		return nil, fmt.Errorf("--policy %q: %w", cfg.Policy, err)
	}
	return &Server{cfg: cfg, cluster: newCluster(cfg.SchedulerName, cfg.PoolLabels), subs: map[chan []byte]struct{}{}}, nil
}

// Watch reads the cluster through rc (the user's kubeconfig) and keeps
// the page up to date until ctx ends. It returns once the first list is
// in, or with the error that kept it from listing.
func (s *Server) Watch(ctx context.Context, rc *rest.Config) error {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "gpuplane-ui"
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating an API client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating an API client: %w", err)
	}
	s.host = rc.Host
	if err := s.cluster.watch(ctx, client, dyn); err != nil {
		return err
	}
	s.rebuild(time.Now())
	go s.loop(ctx)
	return nil
}

// Feed gives the server objects directly, as an informer's handler
// would (Upsert, or Delete when del), for benchmarks that measure the
// page without an API server.
func (s *Server) Feed(obj any, del bool) {
	if del {
		s.cluster.remove(obj)
		return
	}
	obj, _ = s.cluster.transform(obj)
	s.cluster.upsert(obj)
}

// Rebuild builds the page's state now, for Feed's users; Watch's loop
// does it on every change.
func (s *Server) Rebuild() { s.rebuild(time.Now()) }

// loop rebuilds the state after each burst of changes.
func (s *Server) loop(ctx context.Context) {
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cluster.changed:
			t := time.NewTimer(s.cfg.Debounce)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			s.rebuild(time.Now())
		case <-keepAlive.C:
			s.broadcast(nil)
		}
	}
}

func (s *Server) rebuild(now time.Time) {
	v := s.cluster.live.View(now)
	st := s.cluster.build(v, now, s.cfg.Price)
	st.Cluster = s.host
	st.CostFromPrometheus = s.cfg.Prometheus != ""
	s.mu.Lock()
	s.seq++
	st.Seq = s.seq
	s.mu.Unlock()
	b, err := json.Marshal(st)
	if err != nil {
		s.cfg.Logger.Error("encoding the page's state", "err", err)
		return
	}
	s.mu.Lock()
	s.view, s.state, s.built = v, b, now
	s.mu.Unlock()
	s.broadcast(b)
}

// broadcast sends b to every page (nil: a keep-alive); a page still
// reading an older state gets only the newest.
func (s *Server) broadcast(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- b:
		default:
			select {
			case <-ch:
			default:
			}
			ch <- b
		}
	}
}

// Handler serves the page, its assets, the state (/api/state), its
// updates as server-sent events (/api/events), the what-if
// (/api/whatif?group=) and the cost report (/api/cost).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.Handle("GET /", files)
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		b := s.state
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("GET /api/whatif", s.whatIf)
	mux.HandleFunc("GET /api/cost", s.cost)
	return secure(mux)
}

// secure keeps the page to itself: no framing, no scripts or styles but
// its own, and no other origin's requests (a site the user visits must
// not read the cluster through this port).
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			http.Error(w, "cross-origin requests are refused", http.StatusForbidden)
			return
		}
		if f := r.Header.Get("Sec-Fetch-Site"); f != "" && f != "same-origin" && f != "none" {
			http.Error(w, "cross-site requests are refused", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	ch := make(chan []byte, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	first := s.state
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}()
	send := func(b []byte) bool {
		var err error
		if b == nil {
			_, err = io.WriteString(w, ": keep-alive\n\n")
		} else {
			_, err = fmt.Fprintf(w, "event: state\ndata: %s\n\n", b)
		}
		fl.Flush()
		return err == nil
	}
	if first != nil && !send(first) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case b := <-ch:
			if !send(b) {
				return
			}
		}
	}
}

func (s *Server) whatIf(w http.ResponseWriter, r *http.Request) {
	group := r.URL.Query().Get("group")
	if group == "" || len(group) > 512 {
		http.Error(w, "group: want the core's group name (pg/NAMESPACE/NAME or pod/NAMESPACE/NAME)", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	v, now := s.view, s.built
	s.mu.Unlock()
	if v == nil {
		http.Error(w, "the cluster has not been read yet", http.StatusServiceUnavailable)
		return
	}
	s.whatIfMu.Lock()
	defer s.whatIfMu.Unlock()
	held := ""
	if key, ok := cutGroupPrefix(group); ok {
		held = v.Held[key]
	}
	ans, err := whatIf(scheduler.Config{Policy: s.cfg.Policy}, &v.Snapshot, group, held, s.cluster.runningGroups(&v.Snapshot), now)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}

func cutGroupPrefix(group string) (string, bool) {
	for _, p := range []string{"pod/", "pg/"} {
		if len(group) > len(p) && group[:len(p)] == p {
			return group[len(p):], true
		}
	}
	return "", false
}

// runningGroups lists the snapshot's running groups with their
// expected end.
func (c *cluster) runningGroups(snap *model.Snapshot) []runningGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	byName := map[string]*runningGroup{}
	var out []*runningGroup
	for i, chunk := range snap.RunningByNode {
		for j := range chunk {
			a := &chunk[j]
			g := byName[a.Group]
			if g == nil {
				g = &runningGroup{name: a.Group, queue: a.Queue, started: time.UnixMilli(a.StartedAt)}
				byName[a.Group] = g
				out = append(out, g)
			}
			if i < len(snap.Nodes) {
				g.gpus += gpusOf(&snap.Nodes[i], a)
			}
			if x := c.podExtras[a.Pod]; x != nil && !x.started.IsZero() {
				if x.started.Before(g.started) {
					g.started = x.started
				}
				if x.deadline > 0 {
					if end := x.started.Add(x.deadline); end.After(g.endsAt) {
						g.endsAt = end
					}
				}
			}
		}
	}
	res := make([]runningGroup, 0, len(out))
	for _, g := range out {
		res = append(res, *g)
	}
	return res
}

func (s *Server) cost(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Prometheus == "" {
		http.Error(w, "no --prometheus given: the Cost view shows the GPU time of the running pods since each started", http.StatusNotFound)
		return
	}
	by := r.URL.Query().Get("by")
	if by != "namespace" && by != "queue" {
		http.Error(w, "by: want namespace or queue", http.StatusBadRequest)
		return
	}
	rep, err := cost.Compute(r.Context(), cost.Query{Prometheus: s.cfg.Prometheus, Window: s.cfg.CostWindow, By: by, Price: s.cfg.Price, Timeout: time.Minute})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

// Listen opens addr, which must be a loopback address: the page shows
// the cluster with the user's credentials and must not be reachable from
// elsewhere.
func Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--address %q: want HOST:PORT, e.g. 127.0.0.1:8765", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return nil, fmt.Errorf("--address %q: the port must be a number from 0 to 65535", addr)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--address %q: the host must be a loopback address (127.0.0.1, ::1 or localhost): the page reads the cluster with your credentials", addr)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	return l, nil
}

// StateJSON is the page's state as last built.
func (s *Server) StateJSON() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}
