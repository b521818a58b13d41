package pgsink

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// An attempt past cfg.Timeout is cancelled with an error that names the
// step it was at, and is transient (retried, never a record's). A read of
// the positions at an assignment, which runs beside a batch's write, has
// its own step: neither's error or /readyz names the other's.
func TestAttemptTimeoutNamesItsOwnStep(t *testing.T) {
	s := &Sink{cfg: Config{Timeout: 20 * time.Millisecond}}
	inBatch := make(chan struct{})
	release := make(chan struct{})
	batchErr := make(chan error, 1)
	go func() {
		batchErr <- s.attempt(t.Context(), stepDecode, func(ctx context.Context) error {
			s.at(stepCommit)
			close(inBatch)
			<-release
			return nil
		})
	}()
	<-inBatch
	err := s.bounded(stepPositions, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})(t.Context())
	var te *attemptTimeoutError
	if !errors.As(err, &te) || te.step != stepPositions {
		t.Fatalf("the positions read's error %v, want an attemptTimeoutError at %q", err, stepPositions)
	}
	if !strings.Contains(err.Error(), "no answer within postgres.timeout 20ms, at "+stepPositions) {
		t.Errorf("error %q does not say where it waited", err)
	}
	if Classify(err) != ClassTransient {
		t.Errorf("a timeout is %v, want transient", Classify(err))
	}
	if st := s.step.Load(); st == nil || st.name != stepCommit {
		t.Errorf("the batch's step is %v, want %q: the positions read must not take it over", st, stepCommit)
	}
	close(release)
	if err := <-batchErr; err != nil {
		t.Fatal(err)
	}
	if st := s.step.Load(); st != nil {
		t.Errorf("the batch's step is %q after its attempt ended, want none", st.name)
	}
	// The batch's own timeout names the step it reached.
	err = s.attempt(t.Context(), stepDecode, func(ctx context.Context) error {
		s.at(stepLoad)
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.As(err, &te) || te.step != stepLoad {
		t.Fatalf("the batch's error %v, want an attemptTimeoutError at %q", err, stepLoad)
	}
	// A cancelled parent (shutdown) is no timeout.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.attempt(ctx, stepDecode, func(ctx context.Context) error { return ctx.Err() }); errors.As(err, &te) {
		t.Errorf("shutdown read as a timeout: %v", err)
	}
}
