package stage

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/state"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/serde"
)

// The aggregate step (topology.Aggregate) in the engine: a stateful step
// (see state.go) whose state is the open windows of each group key
// (state.Aggregate).
//
// A record runs the stage's other steps, then is added to its windows
// (the step is the stage's last). With emit update each changed window is
// an output at once; with emit final, the windows that the transaction's
// stream time closed are outputs at its end (finish), in the same
// transaction as their tombstones and the input offsets.

// aggregateStep is the stage's aggregate step.
type aggregateStep struct {
	stepInfo
	a     *transform.Aggregate
	store *state.Aggregate // set by open
}

func (g *aggregateStep) open(db *state.DB) stateStore {
	a := g.a
	g.store = state.NewAggregate(db, state.AggregateConfig{Size: a.Size, Advance: a.Advance, Gap: a.Gap, Grace: a.Grace, Kinds: a.Kinds, Update: a.Update})
	return g.store
}

func (g *aggregateStep) begin(t *txn) stepTxn {
	return &aggregateTxn{t: t, a: g.a, agg: g.store.Begin(t.emitChangelog)}
}

// aggregateTxn is the aggregate step in one session's transactions.
type aggregateTxn struct {
	t   *txn
	a   *transform.Aggregate
	agg *state.AggregateTxn
}

// outputs counts the records it consumes without an output as filtered.
// A window result has its own timestamp (its largest event time), so the
// input's timestamp is not checked here.
func (x *aggregateTxn) outputs(r *kgo.Record, src source) ([]*kgo.Record, bool, error) {
	t, a := x.t, x.a
	key, ts, values, err := x.input(r)
	if err != nil || key == nil {
		return nil, t.stateLost, err
	}
	updated, late, err := x.agg.AddFrom(r.Partition, sourceOf(r), key, ts, values)
	stepErr := func(reason string, err error) error { return &dlq.RecordError{Reason: reason, Step: a.Step, Err: err} }
	switch {
	case errors.Is(err, state.ErrNotRestored):
		t.stateLost = true
		return nil, true, nil
	case errors.Is(err, state.ErrOverflow) || errors.Is(err, state.ErrNotNumber):
		return nil, t.stateLost, stepErr(deadletter.ReasonTransform, fmt.Errorf("%w", namedAggErr(a, err)))
	case err != nil:
		t.fail(src, fmt.Errorf("aggregate state: %w", err))
		return nil, t.stateLost, nil
	case late:
		return nil, t.stateLost, lateErr(a, r.Partition, ts)
	}
	outs := make([]*kgo.Record, 0, len(updated))
	for _, res := range updated {
		out, err := t.stage.windowOutput(a, res)
		if err != nil {
			return nil, t.stateLost, err
		}
		outs = append(outs, out)
	}
	return outs, t.stateLost, nil
}

func lateErr(a *transform.Aggregate, partition int32, ts int64) error {
	return &dlq.RecordError{Reason: deadletter.ReasonLate, Step: a.Step, Err: fmt.Errorf("event time %s is past the grace of its windows (the stream time of partition %d has closed them; see stream-time.md)",
		time.UnixMilli(ts).UTC().Format(time.RFC3339Nano), partition)}
}

// verdict is the record error r would get from the aggregate step (its
// other steps, group, time, values, lateness), changing nothing: for the
// envelope of a dead letter the broker refused, which keeps the record's
// own reason. nil when r would be aggregated.
func (x *aggregateTxn) verdict(r *kgo.Record) error {
	key, ts, _, err := x.input(r)
	if err != nil || key == nil {
		return err
	}
	if late, lerr := x.agg.LateFrom(r.Partition, sourceOf(r), key, ts); lerr == nil && late {
		return lateErr(x.a, r.Partition, ts)
	}
	return nil
}

// input runs r through the stage's other steps and reads its group key,
// event time and aggregation values; a nil key with a nil error is a
// record filtered out.
func (x *aggregateTxn) input(r *kgo.Record) (key []byte, ts int64, values []any, err error) {
	t, a := x.t, x.a
	s := t.stage
	in, err := s.decodeInput(r)
	if err != nil {
		return nil, 0, nil, err
	}
	recs := []transform.Record{in}
	if s.pipeline.Len() > 0 {
		if recs, err = s.pipeline.Apply(t.ctx, in); err != nil {
			var se *transform.StepError
			if errors.As(err, &se) {
				return nil, 0, nil, &dlq.RecordError{Reason: deadletter.ReasonTransform, Step: se.Step, Err: se.Err}
			}
			return nil, 0, nil, &dlq.RecordError{Reason: deadletter.ReasonTransform, Err: err}
		}
	}
	if len(recs) == 0 {
		return nil, 0, nil, nil // filtered
	}
	rec := &recs[0] // explode is refused before aggregate: one record
	stepErr := func(reason string, err error) error { return &dlq.RecordError{Reason: reason, Step: a.Step, Err: err} }
	if key, err = a.Group(t.ctx, rec); err != nil {
		return nil, 0, nil, stepErr(deadletter.ReasonKey, err)
	}
	if key == nil {
		return nil, 0, nil, stepErr(deadletter.ReasonKey, errors.New("null record key: an aggregate step groups by the record key"))
	}
	if ts, err = a.Time(t.ctx, rec); err != nil {
		return nil, 0, nil, stepErr(deadletter.ReasonTransform, err)
	}
	if values, err = a.Values(t.ctx, rec); err != nil {
		return nil, 0, nil, stepErr(deadletter.ReasonTransform, err)
	}
	return key, ts, values, nil
}

// namedAggErr replaces the aggregation index in a state error by its name.
func namedAggErr(a *transform.Aggregate, err error) error {
	for i, name := range a.Names {
		prefix := fmt.Sprintf("aggregation %d (%s): ", i, a.Kinds[i])
		if msg := err.Error(); len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
			return fmt.Errorf("aggregation %s (%s): %s", name, a.Kinds[i], msg[len(prefix):])
		}
	}
	return err
}

// finish ends the aggregate state's changes of the open transaction and
// produces the results of the windows its stream time closed; the
// changelog of every window it changed goes in it too.
func (x *aggregateTxn) finish() {
	t := x.t
	closed, err := x.agg.Finish()
	if err != nil {
		t.fail(t.last, fmt.Errorf("aggregate state: %w", err))
		return
	}
	for _, res := range closed {
		out, err := t.stage.windowOutput(x.a, res)
		if err != nil {
			t.fail(t.last, err)
			return
		}
		t.produceWindow(windowID{partition: res.Partition, key: string(res.Key), start: res.Window.Start}, x.a.Step, out)
	}
}

func (x *aggregateTxn) Commit(ends map[int32]int64) error { return x.agg.Commit(ends) }
func (x *aggregateTxn) Discard()                          { x.agg.Discard() }

// windowOutput is the output record of one window's results: key = the
// record key, value = {"key": ..., "window": {"start", "end", "start_ms",
// "end_ms"}, "results": {name: value, ...}}, timestamp = the largest event
// time in the window; a is the step. A retracted session has "results":
// null (Kafka Streams forwards a null for the merged session's windowed
// key; here the key is the record key, so the window is in the value).
func (s *Stage) windowOutput(a *transform.Aggregate, res state.Result) (*kgo.Record, error) {
	b := []byte(`{`)
	if utf8.Valid(res.Key) {
		b = append(b, `"key":`...)
		var err error
		if b, err = serde.AppendJSON(b, string(res.Key), "key"); err != nil {
			return nil, &dlq.RecordError{Reason: deadletter.ReasonEncode, Step: a.Step, Err: err}
		}
	} else {
		b = append(b, `"key_base64":`...)
		b, _ = serde.AppendJSON(b, res.Key, "key") // []byte: base64
	}
	b = append(b, `,"window":{"start":"`...)
	b = time.UnixMilli(res.Window.Start).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","end":"`...)
	b = time.UnixMilli(res.Window.End).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","start_ms":`...)
	b = strconv.AppendInt(b, res.Window.Start, 10)
	b = append(b, `,"end_ms":`...)
	b = strconv.AppendInt(b, res.Window.End, 10)
	if res.Retract {
		b = append(b, `},"results":null}`...)
		return s.resultRecord(res, b), nil
	}
	b = append(b, `},"results":{`...)
	for i, name := range a.Names {
		if i > 0 {
			b = append(b, ',')
		}
		b, _ = serde.AppendJSON(b, name, "results")
		b = append(b, ':')
		b = append(b, res.Values[i]...)
	}
	b = append(b, `}}`...)
	return s.resultRecord(res, b), nil
}

// resultRecord is the output record of res with value b.
func (s *Stage) resultRecord(res state.Result, b []byte) *kgo.Record {
	return &kgo.Record{
		Topic:     s.cfg.Output,
		Key:       res.Key,
		Value:     b,
		Headers:   []kgo.RecordHeader{{Key: HeaderLineageStage, Value: []byte(s.cfg.Stage)}},
		Timestamp: s.outputTimestamp(time.UnixMilli(res.MaxTime)),
	}
}
