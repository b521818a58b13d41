package pgsink

import (
	"context"
	"time"
)

// How often, and for how long at most, the sink reads its input's end
// offsets apart from polling.
const (
	lagInterval = 5 * time.Second
	lagTimeout  = 4 * time.Second
)

// watchLag refreshes the lag of the owned partitions every lagInterval
// until ctx ends. A fetch that returns records refreshes it too, but an
// idle sink fetches none, and a sink whose batch waits on Postgres polls
// nothing: without this the lag would stand still while input arrives,
// and its age would grow while the brokers answer.
func (s *Sink) watchLag(ctx context.Context) {
	tick := time.NewTicker(lagInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			refreshCtx, cancel := context.WithTimeout(ctx, lagTimeout)
			s.refreshLag(refreshCtx)
			cancel()
		}
	}
}
