package cost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

// maxBody bounds one answer from Prometheus: about 100,000 rows of --by
// pod.
const maxBody = 32 << 20

// sample is one element of an instant vector.
type sample struct {
	labels map[string]string
	value  float64
}

// client runs instant queries against one Prometheus.
type client struct {
	base *url.URL
	http *http.Client
}

func newClient(raw string, timeout time.Duration) (*client, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--prometheus %q: want the server's base URL, e.g. http://localhost:9090 (after kubectl port-forward -n monitoring svc/prometheus 9090)", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &client{base: u, http: &http.Client{Timeout: timeout}}, nil
}

// query evaluates q at ts and returns its instant vector.
func (c *client) query(ctx context.Context, q string, ts time.Time) ([]sample, error) {
	form := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(ts.UnixMilli())/1000, 'f', 3, 64)}}
	u := *c.base
	u.Path += "/api/v1/query"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking Prometheus at %s: %w", c.base.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		// Like a kubeconfig's refused credentials: nothing was asked.
		return nil, &cliutil.UnreachableError{Err: fmt.Errorf("asking Prometheus at %s: it refused the credentials (HTTP 401); give them as user:password@ in --prometheus", c.base.Redacted())}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading Prometheus's answer: %w", err)
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("the answer from Prometheus is over %d MiB: narrow --window or group more coarsely (--by namespace)", maxBody>>20)
	}
	return decode(resp.StatusCode, body)
}

// decode reads an instant-query answer of the Prometheus HTTP API.
func decode(status int, body []byte) ([]sample, error) {
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  []json.RawMessage `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the answer (HTTP %d) is not the Prometheus API's JSON (%w): is --prometheus the server's base URL?", status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query refused by Prometheus (HTTP %d, %s): %s", status, r.ErrorType, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("the answer from Prometheus is a %q, want a vector", r.Data.ResultType)
	}
	out := make([]sample, 0, len(r.Data.Result))
	for _, e := range r.Data.Result {
		if len(e.Value) != 2 {
			return nil, errors.New("the answer from Prometheus has a sample without [time, value]")
		}
		var s string
		if err := json.Unmarshal(e.Value[1], &s); err != nil {
			return nil, fmt.Errorf("the answer from Prometheus has a value that is not a string: %s", truncate(string(e.Value[1])))
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(v, 0) {
			return nil, fmt.Errorf("the answer from Prometheus has %q, not a finite number", truncate(s))
		}
		if math.IsNaN(v) {
			continue
		}
		out = append(out, sample{labels: e.Metric, value: v})
	}
	return out, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
