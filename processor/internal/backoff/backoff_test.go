package backoff

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestRetryRetriable(t *testing.T) {
	other := errors.New("boom")
	tests := []struct {
		name      string
		errs      []error // fn's answers, in order; nil ends
		tries     int
		wantCalls int
		wantErr   error
	}{
		{"ok at once", []error{nil}, 5, 1, nil},
		{"coordinator moves, then ok", []error{kerr.CoordinatorNotAvailable, kerr.NotCoordinator, nil}, 5, 3, nil},
		{"not retriable stops at once", []error{other, nil}, 5, 1, other},
		{"bounded", []error{kerr.CoordinatorLoadInProgress, kerr.CoordinatorLoadInProgress, kerr.CoordinatorLoadInProgress}, 2, 2, kerr.CoordinatorLoadInProgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := RetryRetriable(context.Background(), tt.tries, func() error {
				e := tt.errs[calls]
				calls++
				return e
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("calls %d err %v; want %d, %v", calls, err, tt.wantCalls, tt.wantErr)
			}
		})
	}
}
