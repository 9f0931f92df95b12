package metrics

import (
	"net/http"
)

// WithProbes serves the Kubernetes probes beside h: /readyz answers 200
// when ready returns nil and 503 with its error otherwise; /healthz the
// same for live. Either func may be nil (always ok). Other paths go to h.
func WithProbes(h http.Handler, ready, live func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/readyz", probe(ready))
	mux.HandleFunc("/healthz", probe(live))
	return mux
}

func probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if check != nil {
			if err := check(); err != nil {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(err.Error() + "\n"))
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}
