package framework

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	errNotYet := errors.New("3 of 10 nodes ready")
	tests := []struct {
		name       string
		holdsAfter int // calls before cond holds; -1 never
		condErr    error
		lateErr    error // returned from the third call on, if set
		wantErr    error
		wantInErr  string
	}{
		{name: "holds at once", holdsAfter: 0},
		{name: "holds after a few polls", holdsAfter: 3},
		{name: "never holds", holdsAfter: -1, wantErr: ErrTimeout, wantInErr: "nodes ready"},
		{name: "never holds, reason kept", holdsAfter: -1, condErr: errNotYet, wantErr: errNotYet, wantInErr: "3 of 10"},
		// What client-go says when its rate limiter would wait past the
		// deadline is not the reason.
		{name: "never holds, reason kept over the rate limiter's refusal", holdsAfter: -1, condErr: errNotYet,
			lateErr: fmt.Errorf("client rate limiter Wait returned an error: %w", errors.New("rate: Wait(n=1) would exceed context deadline")),
			wantErr: errNotYet, wantInErr: "3 of 10"},
		{name: "never holds, reason kept over a context error", holdsAfter: -1, condErr: errNotYet,
			lateErr: fmt.Errorf("listing: %w", context.DeadlineExceeded), wantErr: errNotYet, wantInErr: "3 of 10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := Poll(context.Background(), 300*time.Millisecond, "nodes ready", func(context.Context) (bool, error) {
				calls++
				if tc.holdsAfter >= 0 && calls > tc.holdsAfter {
					return true, nil
				}
				if tc.lateErr != nil && calls > 2 {
					return false, tc.lateErr
				}
				return false, tc.condErr
			})
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Poll: %v", err)
				}
				if calls != tc.holdsAfter+1 {
					t.Errorf("condition checked %d times, want %d", calls, tc.holdsAfter+1)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("Poll error %v, want %v mentioning %q", err, tc.wantErr, tc.wantInErr)
			}
		})
	}
}
