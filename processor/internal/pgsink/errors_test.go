package pgsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/serde"
)

// Every SQLSTATE class of sink.md's table gets the class it promises.
func TestClassifySQLState(t *testing.T) {
	tests := []struct {
		code string
		want Class
	}{
		{"21000", ClassRow}, // ON CONFLICT DO UPDATE command cannot affect row a second time
		{"22P02", ClassRow}, // invalid text representation: a cast
		{"22003", ClassRow}, // numeric value out of range
		{"22001", ClassRow}, // value too long
		{"23502", ClassRow}, // not null
		{"23503", ClassRow}, // foreign key, also at COMMIT
		{"23505", ClassRow}, // unique
		{"23514", ClassRow}, // check
		{"23P01", ClassRow}, // exclusion
		{"27000", ClassRow}, // triggered data change violation
		{"2F005", ClassRow}, // function executed no return statement
		{"38001", ClassRow},
		{"39P01", ClassRow},
		{"44000", ClassRow}, // with check option
		{"54000", ClassRow}, // index row too large
		{"P0001", ClassRow}, // RAISE EXCEPTION in a trigger
		{"P0004", ClassRow}, // ASSERT
		{"08006", ClassTransient},
		{"08P01", ClassTransient},
		{"25006", ClassTransient}, // read-only: a standby
		{"25P03", ClassTransient}, // idle_in_transaction_session_timeout ended the session
		{"40001", ClassTransient},
		{"40P01", ClassTransient},
		{"53100", ClassTransient}, // disk full
		{"53300", ClassTransient}, // too many connections
		{"55P03", ClassTransient}, // lock_timeout
		{"57014", ClassTransient}, // statement_timeout
		{"57P01", ClassTransient}, // admin shutdown: pg_terminate_backend
		{"57P03", ClassTransient},
		{"58030", ClassTransient},
		{"XX000", ClassTransient},
		{"72000", ClassTransient},
		{"0A000", ClassUnknown}, // feature not supported: a value can raise it (SQL_ASCII and a jsonb \u escape)
		{"28P01", ClassFatal},
		{"3D000", ClassFatal},
		{"3F000", ClassFatal},
		{"42501", ClassFatal}, // insufficient privilege
		{"42703", ClassFatal},
		{"42P10", ClassFatal}, // no unique index for ON CONFLICT
		{"F0000", ClassFatal},
		{"25P02", ClassUnknown},
		{"55000", ClassUnknown},
		{"HV000", ClassUnknown},
		{"0B000", ClassUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: tt.code})
			if got := Classify(err); got != tt.want {
				t.Errorf("Classify(%s) = %v, want %v", tt.code, got, tt.want)
			}
			if IsDataError(err) != (tt.want == ClassRow) || IsFatal(err) != (tt.want == ClassFatal) {
				t.Errorf("%s: IsDataError %v IsFatal %v", tt.code, IsDataError(err), IsFatal(err))
			}
			if IsTransient(err) != (tt.want == ClassTransient || tt.want == ClassUnknown) {
				t.Errorf("%s: IsTransient %v", tt.code, IsTransient(err))
			}
		})
	}
}

// Errors without a SQLSTATE are transient unless they are configuration.
func TestClassifyOther(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"eof", io.ErrUnexpectedEOF, ClassTransient},
		{"dial", &pgconn.ConnectError{}, ClassTransient},
		{"deadline", context.DeadlineExceeded, ClassTransient},
		{"config", fault.NewConfigError("x"), ClassFatal},
		// A record's decode that the schema registry refuses (HTTP 401):
		// the sink stops, it neither dead-letters nor retries for ever.
		{"registry refused", &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("%w: schema id 7: HTTP 401", serde.ErrRegistryRefused)}, ClassFatal},
		{"registry down", &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("%w: schema id 7: HTTP 503", serde.ErrTransient)}, ClassTransient},
		{"stuck", &stuckError{err: &pgconn.PgError{Code: "55000"}}, ClassUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify = %v, want %v", got, tt.want)
			}
		})
	}
	if se := (&stuckError{err: &pgconn.PgError{Code: "55000"}}); !IsFatal(se) || IsTransient(se) || !errors.Is(se, ErrStuck) {
		t.Errorf("stuckError: IsFatal %v IsTransient %v", IsFatal(se), IsTransient(se))
	}
}

// A dead letter's error names the SQLSTATE and what Postgres says about
// the row.
func TestRowError(t *testing.T) {
	pe := &pgconn.PgError{Code: "23503", Message: `insert or update on table "events" violates foreign key constraint "events_parent_fkey"`,
		Detail: `Key (parent)=(nope) is not present in table "parent".`, ConstraintName: "events_parent_fkey", TableName: "events"}
	err := newRowError(fmt.Errorf("x: %w", pe))
	want := `insert or update on table "events" violates foreign key constraint "events_parent_fkey" (SQLSTATE 23503); detail: Key (parent)=(nope) is not present in table "parent".; constraint: events_parent_fkey; table: events`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if sqlState(err) != "23503" {
		t.Errorf("sqlState = %q", sqlState(err))
	}
	plain := errors.New("plain")
	if newRowError(plain) != plain {
		t.Error("newRowError of a non-Postgres error changed it")
	}
	if !strings.Contains((&stuckError{topic: "t", ranges: "p0 [1, 5)", attempts: 6, err: pe}).Error(), "topic t offsets p0 [1, 5): 6 attempts") {
		t.Error("stuckError does not name the batch")
	}
}

// A Postgres error that quotes a large value is cut in the dead letter's
// error, at a UTF-8 boundary and with the count of bytes cut; a short one is
// kept whole.
func TestRowErrorClipsQuotedValues(t *testing.T) {
	big := strings.Repeat("é", 150000) // 300,000 bytes, 2 per rune
	for _, tt := range []struct {
		name string
		err  error
		max  int
		want string
	}{
		{"short kept", &rowError{pe: &pgconn.PgError{Code: "22P02", Message: `invalid input syntax for type integer: "abc"`}}, 200,
			`invalid input syntax for type integer: "abc" (SQLSTATE 22P02)`},
		{"long message", &rowError{pe: &pgconn.PgError{Code: "22P02", Message: `invalid input syntax for type integer: "` + big + `"`}}, maxQuoted + 100,
			"more bytes) (SQLSTATE 22P02)"},
		{"long detail", &rowError{pe: &pgconn.PgError{Code: "23514", Message: "check", Detail: "Failing row contains (" + big + ")."}}, maxQuoted + 100,
			"more bytes)"},
		{"field error", &fieldError{field: "n", column: "n", pe: &pgconn.PgError{Code: "22P02", Message: big}}, maxQuoted + 100,
			"more bytes) (SQLSTATE 22P02)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.err.Error()
			if len(got) > tt.max {
				t.Errorf("error is %d bytes, want at most %d", len(got), tt.max)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("error %.80q... does not contain %q", got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("error is not valid UTF-8: cut inside a rune")
			}
		})
	}
}
