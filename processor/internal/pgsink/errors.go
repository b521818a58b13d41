package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/serde"
)

// errMissingVersion is the cause of a deadletter.ReasonVersion dead letter.
var errMissingVersion = errors.New("missing version")

// errUnorderedVersion is the cause of a deadletter.ReasonVersion dead letter whose
// version is NaN or an infinity.
var errUnorderedVersion = errors.New("version not comparable")

// errKeyFields is the cause of a deadletter.ReasonEventID dead letter: a
// tombstone's key whose fields are not the key column's.
var errKeyFields = errors.New("key fields do not match the key column")

// errBadChange is the cause of a deadletter.ReasonEnvelope dead letter.
var errBadChange = errors.New("change event cannot be applied")

// binaryError is the cause of a deadletter.ReasonDecode dead letter: a
// value for a bytea column that does not read as the change event's
// binary handling mode says bytes are written.
type binaryError struct {
	field, mode string
	err         error
}

func (e *binaryError) Error() string {
	return fmt.Sprintf("field %q (binary_handling %s): %v", e.field, e.mode, e.err)
}

func (e *binaryError) Unwrap() error { return e.err }

// modeError is the cause of a deadletter.ReasonDecode dead letter: a value
// with no schema whose meaning the connector's mode (option, mirrored by
// the sink's setting) leaves open, or that the mode never writes.
type modeError struct {
	field, column, setting, mode, option, why string
}

func (e *modeError) Error() string {
	return fmt.Sprintf("field %q into a %s column (%s %s, the connector's %s): %s", e.field, e.column, e.setting, e.mode, e.option, e.why)
}

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

// Class is what the sink does with a Postgres error of a batch, decided by
// its SQLSTATE (see the table in sink.md, "Faults, by SQLSTATE", and
// https://www.postgresql.org/docs/current/errcodes-appendix.html). Never by
// message text.
type Class int

const (
	// ClassTransient: the database itself failed (a lost connection,
	// a full disk, a restart, a serialization failure or deadlock). The
	// whole batch is retried with backoff, for as long as it takes; no
	// record is ever dead-lettered for it.
	ClassTransient Class = iota
	// ClassRow: Postgres rejected the data of one record (a constraint, a
	// cast, a value out of range, a trigger that raised). The load is
	// split under savepoints until the record is found; it is
	// dead-lettered, the rest is written.
	ClassRow
	// ClassFatal: the configuration is wrong (a missing column or table,
	// no privilege, a bad password). Retrying cannot help: Run stops.
	ClassFatal
	// ClassUnknown: a SQLSTATE none of the above names (a user-defined
	// one a trigger raises, 'U0001', say). A fault that recurs forever is
	// not transient: the load is bisected as for ClassRow. If the error
	// follows single records (each fails alone while the rest of the
	// batch is written), they are dead-lettered with their SQLSTATE. If
	// it follows none (every record fails alone, or the records fail only
	// together), the batch is retried a bounded number of times
	// (maxUnexplained), then Run stops with an error naming the batch's
	// offsets (*stuckError).
	ClassUnknown
)

func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassRow:
		return "row"
	case ClassFatal:
		return "fatal"
	}
	return "unknown"
}

// Classify returns the class of a write error. An error without a
// SQLSTATE (a broken connection, a timeout, a refused dial) is transient,
// except a *fault.ConfigError or a certificate that fails verification,
// which are fatal.
func Classify(err error) Class {
	var ce *fault.ConfigError
	if errors.As(err, &ce) || fault.IsCertificateError(err) || serde.IsRegistryRefused(err) {
		return ClassFatal
	}
	code := sqlState(err)
	if len(code) != 5 {
		return ClassTransient
	}
	switch code {
	case "25006": // read_only_sql_transaction: a standby, until failover promotes it or the DSN finds the primary
		return ClassTransient
	case "25P03": // idle_in_transaction_session_timeout: the session was ended; a new connection retries
		return ClassTransient
	case "55P03", "55006": // lock_not_available (lock_timeout), object_in_use
		return ClassTransient
	case "57014": // query_canceled: statement_timeout or pg_cancel_backend
		return ClassTransient
	case "54000": // program_limit_exceeded: an index row or value too large
		return ClassRow
	}
	switch code[:2] {
	case "08", // connection exception
		"40", // transaction rollback: serialization failure, deadlock
		"53", // insufficient resources: disk full, out of memory, too many connections
		"57", // operator intervention: admin or crash shutdown, cannot connect now
		"58", // system error: I/O
		"XX", // internal error, data corrupted
		"72": // snapshot too old
		return ClassTransient
	case "21", // cardinality violation: two rows of one batch hit one key
		"22", // data exception: a cast, a value out of range, a NUL in text
		"23", // integrity constraint violation: unique, check, not null, foreign key, exclusion
		"27", // triggered data change violation
		"2F", // SQL routine exception, raised by a trigger's function
		"38", // external routine exception, raised by a trigger's function
		"39", // external routine invocation exception
		"44", // with check option violation
		"P0": // PL/pgSQL: RAISE EXCEPTION (P0001), no_data_found, too_many_rows, assert_failure
		return ClassRow
	case "0L", "0P", // invalid grantor, invalid role specification
		"28", // invalid authorization specification
		"3D", // invalid catalog name: no such database
		"3F", // invalid schema name
		"42", // syntax error or access rule violation: undefined column or table, no privilege, no unique index for ON CONFLICT
		"F0": // configuration file error
		return ClassFatal
	}
	// Everything else is unknown, 0A (feature not supported) included:
	// a SQL_ASCII database refuses a jsonb \u escape beyond ASCII with
	// 0A000, one record's value, while a table-wide 0A000 fails every
	// record alone, which stops the sink as an unexplained error.
	return ClassUnknown
}

// IsDataError reports whether err is Postgres rejecting the data of a row
// (ClassRow): the same row fails again however often it is retried, so it
// is dead-lettered.
func IsDataError(err error) bool { return err != nil && Classify(err) == ClassRow }

// IsFatal reports whether err will not go away by retrying (ClassFatal): a
// sink configuration Postgres or the sink itself rejects (SQLSTATE class
// 42, syntax error or access rule violation, such as a missing column or
// no unique index on the event ID; class 28, invalid authorization; ...),
// a server certificate that fails verification (sslmode=verify-full with
// the wrong sslrootcert, say), or a batch stuck on an unclassified error
// (*stuckError).
func IsFatal(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var se *stuckError
	return errors.As(err, &se) || Classify(err) == ClassFatal
}

// IsTransient reports whether err is worth retrying for: anything that is
// neither a row's data error nor fatal nor fenced. ClassUnknown counts as
// transient here (the load has already looked for the records it
// follows); writeBatch bounds its retries of one batch.
func IsTransient(err error) bool {
	return err != nil && !IsDataError(err) && !IsFatal(err) && !errors.Is(err, ErrFenced)
}

// ErrStuck is the cause of a batch that failed maxUnexplained times in a
// row with an error that is neither transient nor a row's (see
// ClassUnknown): Run stops rather than spin.
var ErrStuck = errors.New("batch keeps failing with an unclassified error")

// stuckError names the batch that is stuck: its topic and offset range per
// partition, and the last error.
type stuckError struct {
	topic    string
	ranges   string // "p0 [10, 14), p1 [3, 9)"
	attempts int
	err      error
}

func (e *stuckError) Error() string {
	return fmt.Sprintf("topic %s offsets %s: %d attempts: %v: %v", e.topic, e.ranges, e.attempts, ErrStuck, e.err)
}

func (e *stuckError) Unwrap() []error { return []error{ErrStuck, e.err} }

// rowError is a record's rejection by Postgres, as its dead letter's
// exactly.dlq.error header says it: the message, the SQLSTATE, and the
// detail, constraint, column, table and context ("where", its lines
// joined by " <- ": a trigger's function and line) where Postgres gives
// them.
type rowError struct{ pe *pgconn.PgError }

func (e *rowError) Error() string {
	var b strings.Builder
	b.WriteString(clip(e.pe.Message))
	b.WriteString(" (SQLSTATE " + e.pe.Code + ")")
	for _, kv := range [][2]string{{"detail", e.pe.Detail}, {"constraint", e.pe.ConstraintName}, {"column", e.pe.ColumnName}, {"table", e.pe.TableName}, {"where", strings.ReplaceAll(e.pe.Where, "\n", " <- ")}} {
		if kv[1] != "" {
			b.WriteString("; " + kv[0] + ": " + clip(kv[1]))
		}
	}
	return b.String()
}

func (e *rowError) Unwrap() error { return e.pe }

// maxQuoted is how many bytes of a Postgres message or detail a dead
// letter's error keeps. Postgres quotes the whole input value in a cast
// error ("invalid input syntax for type integer: \"...\""), which for a
// large value would make the error header or column as large as the
// record; the record's own bytes are in the dead letter already.
const maxQuoted = 512

// clip returns s cut to maxQuoted bytes at a UTF-8 boundary, with the count
// of bytes cut: "... (300000 more bytes)". A shorter s is returned as it is.
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	n := maxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s... (%d more bytes)", s[:n], len(s)-n)
}

// newRowError returns the *rowError of err, or err when it has no
// *pgconn.PgError.
func newRowError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &rowError{pe}
	}
	return err
}

// errBadDSN replaces a DSN parse error, which would quote the DSN.
var errBadDSN = fault.NewConfigError("postgres dsn is not a valid connection string")

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

// ErrNoPositionsTable is returned by ResetPositions when the sink's
// positions table does not exist: the sink has never run, and creates it
// when it first starts.
var ErrNoPositionsTable = errors.New("positions table does not exist (the sink creates it when it first starts)")
