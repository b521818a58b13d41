package pgsink

import (
	"bytes"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/serde"
)

// isTombstone reports whether r is a tombstone: a null value, or, of
// json input, the null that Kafka Connect's JSON converter writes with
// schemas.enable, {"schema": {...}, "payload": null} (a delete of
// ExtractNewRecordState with delete.tombstone.handling.mode=tombstone
// comes so). Both are handled alike by the tombstones setting.
func (s *Sink) isTombstone(r *kgo.Record) bool {
	if r.Value == nil {
		return true
	}
	if !s.passJSON || !bytes.Contains(r.Value, []byte(`"`+envPayload+`"`)) || !looksLikeObject(r.Value) {
		return false
	}
	if serde.CheckJSON(r.Value) != nil {
		return false
	}
	p, _, found, err := serde.TopLevelField(r.Value, envPayload)
	if err != nil || !found || string(p) != "null" {
		return false
	}
	names, err := memberNames(r.Value)
	return err == nil && len(names) == 2 && slices.Contains(names, "schema")
}

// IsTombstone reports whether the sink reads r as a tombstone (a null
// value, or Connect's {"schema": ..., "payload": null}).
func (e *EventIDs) IsTombstone(r *kgo.Record) bool {
	return e.s.isTombstone(r)
}
