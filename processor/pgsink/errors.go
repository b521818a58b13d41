package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/exactly-io/exactly/processor/kit"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dead-letter reasons of the sink, written to the exactly.dlq.reason header
// (kit.HeaderReason) beside kit.ReasonDecode.
const (
	// ReasonEventID: the record has no event ID (the event_id column's
	// field is missing, null or empty), or a tombstone to delete has no key.
	ReasonEventID = "event_id"
	// ReasonPostgres: Postgres rejected the row itself (SQLSTATE class 22,
	// data exception, or 23, integrity constraint violation): a NUL
	// character in text or jsonb, a value too long, a value of the wrong
	// type, a check constraint.
	ReasonPostgres = "postgres"
)

// HeaderSQLState is the header holding the SQLSTATE of a dead letter whose
// reason is ReasonPostgres.
const HeaderSQLState = "exactly.dlq.sqlstate"

// ErrFenced is the cause of a batch rolled back because a stored position
// was no longer the one the batch started from: another instance wrote the
// partition since (see Sink). The sink re-reads the positions and seeks.
var ErrFenced = errors.New("stored position moved since the batch started")

// fencedError names the partition whose guard failed.
type fencedError struct {
	partition int32
	expected  *int64 // nil: no stored row was expected
}

func (e *fencedError) Error() string {
	exp := "no stored row"
	if e.expected != nil {
		exp = "next_offset " + strconv.FormatInt(*e.expected, 10)
	}
	return fmt.Sprintf("partition %d: expected %s: %v", e.partition, exp, ErrFenced)
}

func (e *fencedError) Unwrap() error { return ErrFenced }

// IsDataError reports whether err is Postgres rejecting the data of a row
// (SQLSTATE class 22 or 23, or 54000 for a value too large to index): the
// same row fails again however often it is retried, so it is dead-lettered.
func IsDataError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "23":
		return true
	}
	return pe.Code == "54000"
}

// IsFatal reports whether err will not go away by retrying: a sink
// configuration Postgres or the sink itself rejects (SQLSTATE class 42,
// syntax error or access rule violation, such as a missing column or no
// unique index on the event ID; class 28, invalid authorization), or a
// server certificate that fails verification (sslmode=verify-full with the
// wrong sslrootcert, say).
func IsFatal(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ce *kit.ConfigError
	if errors.As(err, &ce) || kit.IsCertificateError(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) == 5 {
		switch pe.Code[:2] {
		case "42", "28":
			return true
		}
	}
	return false
}

// IsTransient reports whether err is worth retrying the whole batch for:
// anything that is neither a row's data error nor fatal. Postgres being
// down, restarting (57P01), refusing connections (57P03), a serialization
// failure or deadlock (class 40) and a broken connection all qualify.
func IsTransient(err error) bool {
	return err != nil && !IsDataError(err) && !IsFatal(err) && !errors.Is(err, ErrFenced)
}

// errBadDSN replaces a DSN parse error, which would quote the DSN.
var errBadDSN = kit.NewConfigError("postgres dsn is not a valid connection string")

// IsUndefinedTable reports whether err is Postgres saying a table does not
// exist (SQLSTATE 42P01, undefined_table).
func IsUndefinedTable(err error) bool { return sqlState(err) == "42P01" }

// IsUndefinedColumn reports whether err is Postgres saying a column does
// not exist (SQLSTATE 42703, undefined_column).
func IsUndefinedColumn(err error) bool { return sqlState(err) == "42703" }

// sqlState returns the SQLSTATE of err, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
