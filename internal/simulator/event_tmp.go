package simulator

import (
	"context"
	"errors"
)

// EventConfig is one event-mode run.
type EventConfig struct {
	Policy     string
	Seed       uint64
	Popularity float64
	Progress   func(done, total int)
}

// RunEvent replays arrivals and departures through the scheduling cycle.
func RunEvent(ctx context.Context, tr *Trace, cfg EventConfig) (*Result, error) {
	return nil, errors.New("event mode: not implemented yet")
}
