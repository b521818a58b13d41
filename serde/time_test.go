package serde

import (
	"testing"
	"time"
)

// ParseTime takes every spelling of a date-time that RFC 3339 §5.6
// allows (t or T or a space between date and time, z or Z), and nothing
// looser: the same instant on the aggregate's time, Avro's timestamps and
// the sink's timestamp columns.
func TestParseTime(t *testing.T) {
	want := time.Date(2026, 1, 1, 10, 0, 0, 500_000_000, time.UTC)
	for _, tc := range []struct {
		in    string
		local bool
		ok    bool
	}{
		{"2026-01-01T10:00:00.5Z", false, true},
		{"2026-01-01t10:00:00.5z", false, true},
		{"2026-01-01 10:00:00.5Z", false, true},
		{"2026-01-01 11:00:00.5+01:00", false, true},
		{"2026-01-01T10:00:00.5", true, true},
		{"2026-01-01 10:00:00.5", true, true},
		{"2026-01-01  10:00:00.5Z", false, false},
		{"2026-01-01_10:00:00.5Z", false, false},
		{"2026-01-01 10:00:00.5", false, false}, // no offset
		{"2026-01-01T10:00:00.5Z", true, false}, // an offset in a local time
		{"2026-01-01", false, false},
		{"", false, false},
	} {
		got, err := ParseTime(tc.in, tc.local)
		if tc.ok != (err == nil) || (tc.ok && !got.Equal(want)) {
			t.Errorf("ParseTime(%q, %v) = %v, %v; want ok %v", tc.in, tc.local, got, err, tc.ok)
		}
	}
}
