package stage

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// Outputs committed older than their topic's retention allows may be
// deleted before anyone reads them. Where a stage or sink of the topology
// reads the topic, its position tells whether it read them; where none
// does (the chain's last topic), nothing would. So the stage records each
// committed range of them in the reset log (resetlog.CausePastRetention),
// and `exactly verify` reports the part of it that was deleted from a
// topic no stage or sink reads.

// pastLog writes those ranges through one client, made at the first.
type pastLog struct {
	mu     sync.Mutex
	w      *resetlog.Writer
	closed bool
	warn   logEvery
}

// recordOld writes the ranges of the old outputs of a committed
// transaction to the reset log. The outputs are committed: a failure is
// logged (at most every 30 s), and verify cannot see those ranges.
func (s *Stage) recordOld(old agedOutputs) {
	if len(old) == 0 {
		return
	}
	byTopic := map[string][]resetlog.Partition{}
	for k, o := range old {
		byTopic[k.topic] = append(byTopic[k.topic], resetlog.Partition{Partition: k.p, From: o.offset, To: o.last + 1})
	}
	pl := &s.outTimes.past
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.warn.every = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for topic, parts := range byTopic {
		err := pl.write(ctx, append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), s.kopts...), resetlog.Entry{
			Kind: "stage", Name: s.cfg.Stage, Group: s.cfg.Group(), Topic: topic, Cause: resetlog.CausePastRetention, Partitions: parts,
		})
		if err != nil && pl.warn.ok("write") {
			s.log.Warn("cannot record outputs older than their topic's retention in the reset log: exactly verify will not see them if they are deleted unread",
				"topic", topic, "log_topic", resetlog.Topic, "err", err)
		}
	}
}

// write writes e, with the writer made at the first call (or a writer of
// its own once closed). Called with mu held.
func (pl *pastLog) write(ctx context.Context, opts []kgo.Opt, e resetlog.Entry) error {
	if pl.closed {
		return resetlog.Write(ctx, opts, e)
	}
	if pl.w == nil {
		w, err := resetlog.NewWriter(opts)
		if err != nil {
			return err
		}
		pl.w = w
	}
	return pl.w.Write(ctx, e)
}

// close closes the writer; later writes make one of their own.
func (pl *pastLog) close() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.w != nil {
		pl.w.Close()
		pl.w = nil
	}
	pl.closed = true
}
