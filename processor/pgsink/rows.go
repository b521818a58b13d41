package pgsink

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/kit"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// op is one change a record makes to the target table: insert (or upsert)
// row, or delete the row whose event ID is id.
type op struct {
	rec *kgo.Record
	del bool
	id  string // the event ID, as text
	row []any  // one string or nil per column, in Config.Columns order
}

var errMissingEventID = errors.New("missing event id")

// toOp turns a record into an op, or says why the record is a dead letter
// (a *kit.RecordError). ok is false, with a nil error, for a
// tombstone that the policy skips.
func (s *Sink) toOp(r *kgo.Record) (o op, ok bool, err error) {
	if r.Value == nil {
		if s.cfg.Tombstones != topology.TombstonesDelete {
			return op{}, false, nil
		}
		if len(r.Key) == 0 {
			return op{}, false, &kit.RecordError{Reason: ReasonEventID,
				Err: fmt.Errorf("%w: a tombstone to delete needs the event id as its key", errMissingEventID)}
		}
		return op{rec: r, del: true, id: string(r.Key)}, true, nil
	}
	var obj map[string]any
	if s.passJSON {
		// Only the mapped fields are decoded; $value is the bytes as
		// they came.
		obj, err = serde.JSONFields(r.Value, s.fieldSources)
	} else {
		var v any
		v, err = s.codec.Decode(r.Value)
		obj, _ = v.(map[string]any)
	}
	if err != nil {
		return op{}, false, &kit.RecordError{Reason: kit.ReasonDecode, Err: err}
	}
	row := make([]any, len(s.cfg.Columns))
	for i, c := range s.cfg.Columns {
		row[i], err = s.columnValue(r, obj, c.Source)
		if err != nil {
			return op{}, false, &kit.RecordError{Reason: kit.ReasonDecode, Err: fmt.Errorf("column %q: %w", c.Name, err)}
		}
	}
	id, _ := row[s.eventIDIndex].(string)
	if id == "" {
		src := s.cfg.Columns[s.eventIDIndex].Source
		why := fmt.Errorf("%w: field %q is missing, null or empty", errMissingEventID, src)
		if obj == nil && src[0] != '$' {
			why = fmt.Errorf("%w: value is not a json object", errMissingEventID)
		}
		return op{}, false, &kit.RecordError{Reason: ReasonEventID, Err: why}
	}
	if s.versionIndex >= 0 && row[s.versionIndex] == nil {
		return op{}, false, &kit.RecordError{Reason: ReasonVersion,
			Err: fmt.Errorf("%w: field %q of version column %q is missing or null", errMissingVersion, s.cfg.Columns[s.versionIndex].Source, s.cfg.Version)}
	}
	return op{rec: r, id: id, row: row}, true, nil
}

// columnValue returns the staging text of one column, or nil for NULL.
// Every staging column is text; the INSERT casts it to the column's type,
// so that a value of the wrong type is a data error of its row.
func (s *Sink) columnValue(r *kgo.Record, obj map[string]any, src string) (any, error) {
	switch src {
	case topology.SourceValue:
		if s.cfg.InputFormat == serde.Bytes {
			return `\x` + hex.EncodeToString(r.Value), nil // bytea hex input
		}
		return string(r.Value), nil // valid UTF-8: the codec checked
	case topology.SourceKey:
		if r.Key == nil {
			return nil, nil
		}
		return string(r.Key), nil
	case topology.SourceTopic:
		return r.Topic, nil
	case topology.SourcePartition:
		return strconv.FormatInt(int64(r.Partition), 10), nil
	case topology.SourceOffset:
		return strconv.FormatInt(r.Offset, 10), nil
	case topology.SourceTimestamp:
		return r.Timestamp.UTC().Format(time.RFC3339Nano), nil
	}
	fv, ok := obj[src]
	if !ok || fv == nil {
		return nil, nil
	}
	switch fv := fv.(type) {
	case string:
		return fv, nil
	case json.Number:
		return string(fv), nil
	case bool:
		return strconv.FormatBool(fv), nil
	}
	b, err := s.jsonCodec.Encode(fv)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}
