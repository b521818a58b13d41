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
	if !s.passJSON || !nullFirstOrLast(r.Value) || !bytes.Contains(r.Value, []byte(`"`+envPayload+`"`)) || !looksLikeObject(r.Value) {
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

// nullFirstOrLast reports whether b, when it is a JSON object, may have
// null as the value of its first or last member, from its first and last
// few bytes: Connect's wrapped null has two members, one of them the null
// payload, so a record without is no tombstone, known without a scan of
// its whole value (most records are rows). It may answer true for b that
// is no such object; never false for one that is.
func nullFirstOrLast(b []byte) bool { return nullLast(b) || nullFirst(b) }

// nullLast reports whether b ends with null, then '}' (white space
// around either).
func nullLast(b []byte) bool {
	end := len(b)
	for end > 0 && isJSONSpace(b[end-1]) {
		end--
	}
	if end == 0 || b[end-1] != '}' {
		return false
	}
	end--
	for end > 0 && isJSONSpace(b[end-1]) {
		end--
	}
	return bytes.HasSuffix(b[:end], []byte("null"))
}

// nullFirst reports whether b starts an object whose first member's
// value is null.
func nullFirst(b []byte) bool {
	i := skipJSONSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	if i = skipJSONSpace(b, i+1); i >= len(b) || b[i] != '"' {
		return false
	}
	for i++; i < len(b) && b[i] != '"'; i++ { // the key
		if b[i] == '\\' {
			i++
		}
	}
	if i = skipJSONSpace(b, i+1); i >= len(b) || b[i] != ':' {
		return false
	}
	return bytes.HasPrefix(b[skipJSONSpace(b, i+1):], []byte("null"))
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// IsTombstone reports whether the sink reads r as a tombstone (a null
// value, or Connect's {"schema": ..., "payload": null}).
func (e *EventIDs) IsTombstone(r *kgo.Record) bool {
	return e.s.isTombstone(r)
}
