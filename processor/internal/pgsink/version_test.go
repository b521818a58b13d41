package pgsink

import (
	"errors"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor/internal/fault"
)

// A version column must order versions as numbers or times: a text (or
// other unordered) column is refused at start, naming the column and the
// ALTER that fixes it; ordered types, and domains over them, pass.
func TestCheckVersionType(t *testing.T) {
	for _, tt := range []struct {
		typ  colType
		fail bool
	}{
		{plainType("bigint"), false},
		{plainType("integer"), false},
		{colType{name: "numeric(20,4)", base: "numeric", full: "numeric(20,4)", mod: 1}, false},
		{plainType("double precision"), false},
		{plainType("timestamp with time zone"), false},
		{plainType("date"), false},
		{colType{name: "ver", base: "bigint", full: "bigint", mod: -1, domain: true}, false},
		{plainType("text"), true},
		{colType{name: "character varying(10)", base: "character varying", full: "character varying(10)", mod: 14}, true},
		{plainType("uuid"), true},
		{plainType("jsonb"), true},
		{plainType("boolean"), true},
	} {
		t.Run(tt.typ.name, func(t *testing.T) {
			s := &Sink{cfg: Config{Version: "v", Columns: []Column{{Name: "id", Source: "id"}, {Name: "v", Source: "version"}}},
				table: table{"s", "t"}, types: []colType{plainType("text"), tt.typ}}
			err := s.checkVersionType()
			if (err != nil) != tt.fail {
				t.Fatalf("checkVersionType() = %v, want failure %v", err, tt.fail)
			}
			if err == nil {
				return
			}
			var ce *fault.ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %v is not a config error", err)
			}
			for _, want := range []string{`version column "v"`, tt.typ.name, "ALTER TABLE"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
	s := &Sink{cfg: Config{Columns: []Column{{Name: "v", Source: "v"}}}, types: []colType{plainType("text")}}
	if err := s.checkVersionType(); err != nil {
		t.Errorf("no version configured: %v, want nil", err)
	}
}

// Versions that Postgres reads as NaN or an infinity in an ordered type
// are refused: a row stored with one could never be replaced.
func TestUnbeatable(t *testing.T) {
	for v, want := range map[string]bool{
		"NaN": true, "nan": true, "Infinity": true, "-Infinity": true, "+inf": true, " infinity ": true, "-INF": true,
		"1": false, "9223372036854775807": false, "1e308": false, "2026-01-01T00:00:00Z": false, "": false, "info": false, "nano": false,
	} {
		if got := unbeatable(v); got != want {
			t.Errorf("unbeatable(%q) = %v, want %v", v, got, want)
		}
	}
}
