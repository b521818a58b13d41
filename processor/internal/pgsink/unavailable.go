package pgsink

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/topology"
)

// unavailable reports whether field value v, for a column of type t
// (with Connect schema fs, if any), is the placeholder of a value the
// change event did not capture (Config.UnavailableValue): the text
// itself, its bytes (Avro bytes; base64 in JSON where a bytes schema
// types the field, or for a bytea column unless the binary handling mode
// writes bytes as text), or one of the array and map forms Debezium
// builds from it for an array or hstore column (placeholderArray).
func (s *Sink) unavailable(v any, t colType, fs connectSchema) bool {
	ph := s.cfg.UnavailableValue
	if ph == "" || v == nil {
		return false
	}
	switch v := v.(type) {
	case string:
		if v == ph {
			return true
		}
		switch {
		case fs.Type == "bytes":
			return v == base64.StdEncoding.EncodeToString([]byte(ph))
		case t.base == "bytea":
			// Debezium's bytes mode writes the placeholder's bytes (base64
			// in JSON), its hex mode the text itself; base64 and
			// base64-url-safe write null instead (PostgresValueConverter).
			mode := s.cfg.BinaryHandling
			return (mode == "" || mode == topology.BinaryBytes) && v == base64.StdEncoding.EncodeToString([]byte(ph))
		}
		return false
	case []byte:
		return string(v) == ph
	case json.RawMessage:
		return s.unavailableJSON(v, t, fs)
	case []any:
		return s.placeholderArray(v, t, fs)
	case map[string]any:
		return len(v) == 1 && v[ph] == ph
	}
	return false
}

// unavailableJSON reports whether raw, a JSON field, is an array or map
// form of the placeholder (see unavailable).
func (s *Sink) unavailableJSON(raw json.RawMessage, t colType, fs connectSchema) bool {
	ph := s.cfg.UnavailableValue
	// Longer than the longest form (one element of up to 7 bytes per byte
	// of the placeholder, "\"Xw==\","), with room for white space: some
	// other value, not worth decoding.
	if len(raw) == 0 || len(raw) > 8*len(ph)+64 {
		return false
	}
	switch raw[0] {
	case '[':
		var els []any
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if d.Decode(&els) != nil {
			return false
		}
		return s.placeholderArray(els, t, fs)
	case '{':
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			return false
		}
		return s.unavailable(m, t, fs)
	}
	return false
}

// placeholderArray reports whether els, the elements of an array field,
// are Debezium's placeholder for an unchanged array column
// (UnchangedToastedPlaceholder): the placeholder alone, as text or bytes
// (or, for uuid[], the name-based UUID of its bytes); or, for an element
// type of numbers (integers, floats, decimals, and the dates and times
// written as integers), one element per byte of the placeholder, that
// byte's value. A boolean[]'s form, one true per byte, is also a real
// value, and is not read as the placeholder.
func (s *Sink) placeholderArray(els []any, t colType, fs connectSchema) bool {
	ph := s.cfg.UnavailableValue
	elem, _ := arrayElement(t)
	var items connectSchema
	if fs.Items != nil {
		items = *fs.Items
	}
	if len(els) == 1 {
		if u, ok := els[0].(string); ok && u == placeholderUUID(ph) {
			return true
		}
		if s.unavailable(els[0], elem, items) {
			return true
		}
	}
	if len(els) != len(ph) {
		return false
	}
	for i, e := range els {
		if items.Name == lgAvroDecimal {
			// The codec read the byte as the unscaled value of the
			// items' scale: 95 of scale 2 is "0.95".
			if d, ok := e.(string); !ok || !unscaledIs(d, int8(ph[i])) {
				return false
			}
			continue
		}
		if !placeholderByte(e, int8(ph[i])) {
			return false
		}
	}
	return true
}

// unscaledIs reports whether decimal text d is b with some scale.
func unscaledIs(d string, b int8) bool {
	neg := strings.HasPrefix(d, "-")
	digits := strings.TrimLeft(strings.Replace(strings.TrimPrefix(d, "-"), ".", "", 1), "0")
	want := strconv.Itoa(int(b))
	if b < 0 {
		want = want[1:]
	}
	if b == 0 {
		return digits == "" && !neg
	}
	return neg == (b < 0) && digits == want
}

// placeholderByte reports whether array element e is b, a byte of the
// placeholder (a Java byte: signed), as Debezium writes it for a number
// element type: the number itself, or for a decimal the base64 of its
// one unscaled byte (a VariableScaleDecimal's of scale 0).
func placeholderByte(e any, b int8) bool {
	switch e := e.(type) {
	case json.Number:
		f, err := e.Float64()
		return err == nil && f == float64(b)
	case int32:
		return int64(e) == int64(b)
	case int64:
		return e == int64(b)
	case float32:
		return float64(e) == float64(b)
	case float64:
		return e == float64(b)
	case string:
		return e == base64.StdEncoding.EncodeToString([]byte{byte(b)})
	case map[string]any:
		return len(e) == 2 && fmt.Sprint(e["scale"]) == "0" && placeholderByte(e["value"], b)
	}
	return false
}

// placeholderUUID is Java's UUID.nameUUIDFromBytes of ph (a version 3,
// MD5, name-based UUID), Debezium's placeholder in a uuid[].
func placeholderUUID(ph string) string {
	h := md5.Sum([]byte(ph))
	h[6] = h[6]&0x0f | 0x30
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// keepColumn is the staging column of an op's kept columns (op.keep): the
// indexes of those columns, NULL for none.
const keepColumn = "keep"

// keptIndexes are the columns some op of ops keeps, in order.
func keptIndexes(ops []op) []int {
	var idx []int
	for _, o := range ops {
		for i, k := range o.keep {
			if k && !slices.Contains(idx, i) {
				idx = append(idx, i)
			}
		}
	}
	slices.Sort(idx)
	return idx
}

// insertKeepRun is insertRun for ops of which some keep columns (kept,
// keptIndexes): the staging rows carry the kept indexes, and the INSERT
// fills each kept column of the row it writes (insertKeepSQL).
func (s *Sink) insertKeepRun(ctx context.Context, tx pgx.Tx, ops []op, kept []int, res *result) error {
	rows := make([][]any, len(ops))
	for i, o := range ops {
		var k []int32
		for c, on := range o.keep {
			if on {
				k = append(k, int32(c))
			}
		}
		row := append(o.row[:len(o.row):len(o.row)], int32(i))
		if k != nil {
			row = append(row, k)
		} else {
			row = append(row, nil)
		}
		rows[i] = row
	}
	cols := append(s.stagingColumns(), keepColumn)
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", s.sql.stagingName}, cols, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	var pb pgx.Batch
	pb.Queue(s.insertKeepSQL(kept))
	pb.Queue(s.sql.truncate)
	br := tx.SendBatch(ctx, &pb)
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	res.rows += tag.RowsAffected()
	res.duplicates += int64(len(ops)) - tag.RowsAffected()
	return nil
}

// storedAlias is the target table's alias for the stored row a kept
// column is filled from.
const storedAlias = "exactly_stored"

// insertKeepSQL is the load's INSERT (buildLoadSQL) for a run whose ops
// keep the columns kept. Of the row it writes for an event ID, a kept
// column takes, in order: the value of the run's next record of that ID
// in the order the run keeps them (upsert mode; with a version, only
// one newer than the stored row's), so that two updates of one row in
// one batch, each missing another column, are both applied; else the
// stored row's value; else, with no stored row, nothing is known of the
// value, and the record is refused (a row error naming the column): it
// is a dead letter, not a row with a made-up value.
func (s *Sink) insertKeepSQL(kept []int) string {
	key := make([]string, len(kept))
	for i, k := range kept {
		key[i] = strconv.Itoa(k)
	}
	cacheKey := strings.Join(key, ",")
	s.typed.keepSQLMu.Lock()
	defer s.typed.keepSQLMu.Unlock()
	if q, ok := s.typed.keepSQL[cacheKey]; ok {
		return q
	}
	var casts, values, windows, target, updates []string
	eid := pgx.Identifier{s.cfg.EventID}.Sanitize()
	keyV := fmt.Sprintf("v%d", s.eventIDIndex)
	upsert := s.cfg.Mode == topology.ModeUpsert
	order := ordColumn + " DESC"
	if s.versionIndex >= 0 {
		order = fmt.Sprintf("v%d DESC, %s ASC", s.versionIndex, ordColumn)
	}
	if !upsert {
		order = ordColumn + " ASC"
	}
	for i, c := range s.cfg.Columns {
		sc := fmt.Sprintf("c%d", i)
		col := pgx.Identifier{c.Name}.Sanitize()
		target = append(target, col)
		casts = append(casts, fmt.Sprintf("%s AS v%d", castExpr(sc, c.Name, s.types[i]), i))
		if c.Name != s.cfg.EventID {
			updates = append(updates, col+" = EXCLUDED."+col)
		}
		if !slices.Contains(kept, i) {
			values = append(values, fmt.Sprintf("staged.v%d", i))
			continue
		}
		casts = append(casts, fmt.Sprintf("coalesce(%d = ANY(%s), false) AS k%d", i, keepColumn, i))
		w := fmt.Sprintf("(PARTITION BY %s ORDER BY k%d ASC, %s)", keyV, i, order)
		windows = append(windows,
			fmt.Sprintf("first_value(v%d) OVER %s AS d%d", i, w, i),
			fmt.Sprintf("first_value(k%d) OVER %s AS dk%d", i, w, i))
		donor := fmt.Sprintf("upsert AND NOT staged.dk%d", i)
		if s.versionIndex >= 0 {
			vc := pgx.Identifier{s.cfg.Version}.Sanitize()
			windows = append(windows, fmt.Sprintf("first_value(v%d) OVER %s AS dv%d", s.versionIndex, w, i))
			donor += fmt.Sprintf(" AND (%[1]s.%[2]s IS NULL OR %[1]s.%[3]s IS NULL OR staged.dv%[4]d > %[1]s.%[3]s)", storedAlias, eid, vc, i)
		}
		donor = strings.Replace(donor, "upsert", strconv.FormatBool(upsert), 1)
		msg := quoteLiteral(fmt.Sprintf("field %q holds the unavailable-value placeholder (the change event did not capture its value) and no stored row holds a value to keep", c.Source))
		values = append(values, fmt.Sprintf("CASE WHEN NOT staged.k%[1]d THEN staged.v%[1]d WHEN %[2]s THEN staged.d%[1]d WHEN %[3]s.%[4]s IS NOT NULL THEN %[3]s.%[5]s ELSE %[6]s END",
			i, donor, storedAlias, eid, col, refuseCall("NULL", c.Name, s.types[i], msg)))
	}
	keep := ordColumn + " DESC"
	if !upsert {
		keep = ordColumn + " ASC"
	}
	conflict, into := "DO NOTHING", s.table.String()
	if upsert {
		if len(updates) > 0 {
			conflict = "DO UPDATE SET " + strings.Join(updates, ", ")
		}
		if s.versionIndex >= 0 {
			vc := pgx.Identifier{s.cfg.Version}.Sanitize()
			keep = fmt.Sprintf("v%d DESC, %s ASC", s.versionIndex, ordColumn)
			into += " AS " + versionTarget
			conflict += fmt.Sprintf(" WHERE %s.%s < EXCLUDED.%s OR %s.%s IS NULL", versionTarget, vc, vc, versionTarget, vc)
		}
	}
	win := ""
	if len(windows) > 0 {
		win = ", " + strings.Join(windows, ", ")
	}
	q := fmt.Sprintf("WITH %[1]s AS MATERIALIZED (SELECT %[2]s, %[3]s FROM pg_temp.%[4]s) INSERT INTO %[5]s (%[6]s) SELECT %[7]s FROM (SELECT DISTINCT ON (%[8]s) *%[12]s FROM %[1]s ORDER BY %[8]s, %[9]s) AS staged LEFT JOIN %[13]s AS %[14]s ON %[14]s.%[10]s %[15]s staged.%[8]s ORDER BY staged.%[3]s ON CONFLICT (%[10]s) %[11]s",
		castRows, strings.Join(casts, ", "), ordColumn, s.sql.stagingName, into, strings.Join(target, ", "), strings.Join(values, ", "),
		keyV, keep, eid, conflict, win, s.table.String(), storedAlias, eqOp(s.types[s.eventIDIndex]))
	if s.typed.keepSQL == nil {
		s.typed.keepSQL = map[string]string{}
	}
	s.typed.keepSQL[cacheKey] = q
	return q
}
