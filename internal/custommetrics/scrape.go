package custommetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ScraperConfig configures a Scraper.
type ScraperConfig struct {
	Client kubernetes.Interface
	Store  *Store
	// Namespace and Service name the agents' metrics Service; its
	// EndpointSlices list the agents.
	Namespace, Service string
	// Port is the name of the Service port the agents serve /metrics on
	// ("metrics").
	Port string
	// Scheme is http or https; HTTP is the client for both.
	Scheme string
	HTTP   *http.Client
	// Interval is the time between two reads of every agent.
	Interval time.Duration
	Logger   *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Scraper reads every agent's per-pod GPU use into a Store.
type Scraper struct{ cfg ScraperConfig }

// maxAnswer bounds one agent's /metrics answer.
const maxAnswer = 64 << 20

// NewScraper returns a Scraper, or an error naming the bad field.
func NewScraper(cfg ScraperConfig) (*Scraper, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("custommetrics: Client is required")
	case cfg.Store == nil:
		return nil, errors.New("custommetrics: Store is required")
	case cfg.Namespace == "" || cfg.Service == "":
		return nil, errors.New("custommetrics: the agents' metrics Service (namespace and name) is required")
	case cfg.Port == "":
		return nil, errors.New("custommetrics: the agents' metrics port name is required")
	case cfg.Scheme != "http" && cfg.Scheme != "https":
		return nil, fmt.Errorf("custommetrics: scheme must be http or https, got %q", cfg.Scheme)
	case cfg.Interval <= 0:
		return nil, fmt.Errorf("custommetrics: interval must be positive, got %v", cfg.Interval)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: cfg.Interval}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Scraper{cfg: cfg}, nil
}

// Run reads every agent once per interval until ctx ends.
func (s *Scraper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.Once(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("reading the agents' per-pod GPU metrics", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once reads every ready agent the Service lists and replaces the store's
// values with theirs. An agent that does not answer loses its pods' values
// (the API then serves none for them, and the HPA sees them missing);
// the error names it.
func (s *Scraper) Once(ctx context.Context) error {
	slices, err := s.cfg.Client.DiscoveryV1().EndpointSlices(s.cfg.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.cfg.Service})
	if err != nil {
		return fmt.Errorf("listing the endpoints of Service %s/%s: %w", s.cfg.Namespace, s.cfg.Service, err)
	}
	pods := map[PodKey]PodGPU{}
	var errs []error
	for _, target := range targets(slices.Items, s.cfg.Port) {
		url := s.cfg.Scheme + "://" + target + "/metrics"
		if err := s.read(ctx, url, pods); err != nil {
			errs = append(errs, err)
		}
	}
	s.cfg.Store.Replace(pods)
	return errors.Join(errs...)
}

func (s *Scraper) read(ctx context.Context, url string, into map[PodKey]PodGPU) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading %s: %s", url, resp.Status)
	}
	if err := ParseAgent(io.LimitReader(resp.Body, maxAnswer), s.cfg.Now(), into); err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	return nil
}

// targets lists host:port of every ready endpoint on the named port.
func targets(slices []discoveryv1.EndpointSlice, port string) []string {
	var out []string
	for _, sl := range slices {
		var num int32
		for _, p := range sl.Ports {
			if p.Name != nil && *p.Name == port && p.Port != nil {
				num = *p.Port
			}
		}
		if num <= 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				if net.ParseIP(a) == nil {
					continue // not an address: never dial what the cluster says blindly
				}
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(num))))
			}
		}
	}
	return out
}
