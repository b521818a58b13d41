package reset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// LogTopic is the topic where every executed reset is written, one record
// per reset: the positions it moved, from and to (resetlog.Topic, which
// also holds the ranges readers found deleted before they read them).
const LogTopic = resetlog.Topic

// LogEntry is one record of LogTopic, its JSON value; its key is
// "<kind>/<name>". A reset's has no Cause.
type LogEntry = resetlog.Entry

// LogPartition is one partition a reset moved: From is the position
// before (NoPosition: none stored), To the position after.
type LogPartition = resetlog.Partition

// entry is the log entry of executing p at at.
func (p Plan) entry(at time.Time) LogEntry {
	e := LogEntry{Kind: p.Kind, Name: p.Name, Group: p.Group, PositionsTable: p.PositionsTable, Topic: p.Topic, TopicID: kadm.TopicID(p.TopicID).String(),
		Target: p.Target.String(), At: at.UTC()}
	for _, c := range p.Changes {
		e.Partitions = append(e.Partitions, LogPartition{Partition: c.Partition, From: c.Current, To: c.New})
	}
	return e
}

// logTransactionalID is the transactional ID that writes the entries of
// one stage's or sink's resets: a second reset of it fences the first.
func logTransactionalID(kind, name string) string { return "exactly-reset-" + kind + "-" + name }

// WithLog runs apply, the change of plan p, inside a Kafka transaction
// that writes p's entry to LogTopic, and commits the transaction only
// when apply succeeds: an entry is never read for a reset that failed. A
// crash between apply and the commit leaves the reset applied and its
// entry aborted; verify then reports the skipped records as lost, a false
// alarm rather than a loss hidden. kopts connect to the cluster.
func WithLog(ctx context.Context, kopts []kgo.Opt, p Plan, apply func(context.Context) error) error {
	cl, err := kgo.NewClient(append(slices.Clone(kopts), kgo.TransactionalID(logTransactionalID(p.Kind, p.Name)),
		kgo.DefaultProduceTopic(LogTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return fmt.Errorf("reset log: %w", err)
	}
	defer cl.Close()
	if err := createLog(ctx, kadm.NewClient(cl)); err != nil {
		return err
	}
	value, err := json.Marshal(p.entry(time.Now()))
	if err != nil {
		return fmt.Errorf("reset log: %w", err)
	}
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("reset log: begin transaction: %w", err)
	}
	rec := &kgo.Record{Key: []byte(p.Kind + "/" + p.Name), Value: value, Partition: 0}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		_ = cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
		return fmt.Errorf("reset log: write to %s: %w (nothing changed)", LogTopic, err)
	}
	if err := apply(ctx); err != nil {
		_ = cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
		return err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("the reset is applied, but its record in %s was not committed, so verify counts the records it skipped as lost: %w", LogTopic, err)
	}
	return nil
}

func createLog(ctx context.Context, adm *kadm.Client) error {
	if err := resetlog.Create(ctx, adm); err != nil {
		return fmt.Errorf("reset log: %w (nothing changed)", err)
	}
	return nil
}

// ReadLog returns every committed entry of LogTopic, in the order the
// resets were executed; none when the topic does not exist. It reads up
// to the topic's last stable offset and gives up when ctx is done.
func ReadLog(ctx context.Context, kopts []kgo.Opt) ([]LogEntry, error) {
	cl, err := kgo.NewClient(append(slices.Clone(kopts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{LogTopic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Commit and abort markers are returned too, so the offsets read
		// reach the last stable offset even when the log ends in one.
		kgo.KeepControlRecords())...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", LogTopic, err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, LogTopic)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", LogTopic, err)
	}
	end, ok := ends.Lookup(LogTopic, 0)
	if !ok || errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if end.Err != nil {
		return nil, fmt.Errorf("read %s: %w", LogTopic, end.Err)
	}
	var out []LogEntry
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: at offset %d of %d: %w", LogTopic, next, end.Offset, err)
		}
		if err := fs.Err0(); err != nil && !kerr.IsRetriable(err) {
			return nil, fmt.Errorf("read %s: %w", LogTopic, err)
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			next = max(next, r.Offset+1)
			if r.Attrs.IsControl() || r.Offset >= end.Offset {
				return
			}
			var e LogEntry
			if err := json.Unmarshal(r.Value, &e); err != nil {
				bad = errors.Join(bad, fmt.Errorf("offset %d: %w", r.Offset, err))
				return
			}
			out = append(out, e)
		})
		if bad != nil {
			return nil, fmt.Errorf("read %s: %w", LogTopic, bad)
		}
	}
	return out, nil
}

// Skip is a range of offsets [From, To) of one partition that a reset
// moved past: its records are not processed, on purpose.
type Skip struct {
	Partition int32     `json:"partition"`
	From      int64     `json:"from"`
	To        int64     `json:"to"`
	At        time.Time `json:"at"`     // when the reset was executed
	Target    string    `json:"target"` // what it was asked for
}

// Skips returns the ranges that the logged resets of one stage or sink
// left skipped, by partition, in order: the entries whose kind, name,
// positions table, topic and topic ID (a topic re-created under the same
// name is another) are of's. A reset to position n skips [from, n)
// when it moves forward (from the log start, 0, when nothing was stored);
// and any reset to n makes the records at n and after read again, so it
// ends the ranges of earlier resets at n.
func Skips(entries []LogEntry, of LogEntry) map[int32][]Skip {
	out := map[int32][]Skip{}
	for _, e := range entries {
		if e.Cause != "" || e.Kind != of.Kind || e.Name != of.Name || e.PositionsTable != of.PositionsTable || e.Topic != of.Topic || e.TopicID != of.TopicID {
			continue
		}
		for _, lp := range e.Partitions {
			var kept []Skip
			for _, s := range out[lp.Partition] {
				if s.To = min(s.To, lp.To); s.From < s.To {
					kept = append(kept, s)
				}
			}
			from := max(lp.From, 0)
			if from < lp.To {
				kept = append(kept, Skip{Partition: lp.Partition, From: from, To: lp.To, At: e.At, Target: e.Target})
			}
			out[lp.Partition] = kept
		}
	}
	for p, ss := range out {
		if len(ss) == 0 {
			delete(out, p)
		}
	}
	return out
}
