package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// DefaultAddr is dcgm-exporter's port, which gpuplane keeps.
const DefaultAddr = ":9400"

// Path is where the metrics are served.
const Path = "/metrics"

// NewHandler returns an HTTP handler serving e at Path on a registry of
// its own (no process-wide default registry), with /healthz answering
// "ok". The series of extra gatherers (other parts' own registries) are
// served alongside; their names must not clash with the exporter's.
func NewHandler(e *Exporter, extra ...prometheus.Gatherer) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(e); err != nil {
		return nil, fmt.Errorf("registering the GPU exporter: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(append(prometheus.Gatherers{reg}, extra...), promhttp.HandlerOpts{
		// A failing collector must not cost the other series.
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux, nil
}

// Serve serves h on addr (DefaultAddr when empty) in plain HTTP until ctx
// ends. ready, when not nil, receives the bound address once the listener
// is open, which tells a caller that asked for port 0 where to connect.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger, ready func(net.Addr)) error {
	return ServeWeb(ctx, addr, "", h, log, ready)
}

// ServeWeb is Serve with a web configuration file (webConfig) in the format
// of Prometheus' exporter-toolkit, as node_exporter's --web.config.file
// takes it: TLS (server certificate and key, client certificate
// authentication), basic-auth users with bcrypt-hashed passwords, HTTP
// headers. The file is checked before the listener opens, so a mistake
// stops the agent with the file named, and re-read on each new connection,
// so certificates can be rotated in place. Empty: plain HTTP.
func ServeWeb(ctx context.Context, addr, webConfig string, h http.Handler, log *slog.Logger, ready func(net.Addr)) error {
	if addr == "" {
		addr = DefaultAddr
	}
	if log == nil {
		log = slog.Default()
	}
	if webConfig != "" {
		if err := web.Validate(webConfig); err != nil {
			return fmt.Errorf("the metrics web config %s (--web-config-file): %w", webConfig, err)
		}
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for metrics on %s (change --metrics-addr): %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if ready != nil {
		ready(ln.Addr())
	}
	log.Info("serving metrics", "addr", ln.Addr().String(), "path", Path, "webConfig", webConfig)
	errc := make(chan error, 1)
	go func() { errc <- web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &webConfig}, log) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving metrics on %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stopping the metrics server: %w", err)
	}
	return nil
}
