package pgsink

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/serde"
)

// connectSchema is a Kafka Connect schema as its JSON converter writes it
// beside a value (schemas.enable=true): a field's type, and its logical
// type's name and parameters ("Schemas" in the JsonConverter; Debezium's
// "Data type mappings" for its own names).
type connectSchema struct {
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Field      string            `json:"field"`
	Parameters map[string]string `json:"parameters"`
	Fields     []connectSchema   `json:"fields"`
	Items      *connectSchema    `json:"items"`
	// byName is Fields by name, set by index.
	byName map[string]connectSchema
}

// index sets byName of c and of the structs it encloses.
func (c *connectSchema) index() {
	for i := range c.Fields {
		c.Fields[i].index()
	}
	if len(c.Fields) == 0 {
		return
	}
	c.byName = make(map[string]connectSchema, len(c.Fields))
	for _, f := range c.Fields {
		c.byName[f.Field] = f
	}
}

// fieldMap is the schemas of a struct's fields by name; nil for none.
func (c *connectSchema) fieldMap() map[string]connectSchema {
	if c == nil {
		return nil
	}
	return c.byName
}

// schemaCache holds Connect schemas parsed from their JSON text: a
// topic's records repeat a few schemas, each a few kilobytes that would
// otherwise be parsed per record (two thirds of a change event's decode).
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*connectSchema
}

// maxCachedSchemas bounds a schemaCache; past it, it starts again.
const maxCachedSchemas = 64

// parse returns the schema whose JSON is raw, indexed; shared, read only.
func (c *schemaCache) parse(raw []byte) (*connectSchema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc, ok := c.m[string(raw)]; ok {
		return sc, nil
	}
	sc := new(connectSchema)
	if err := json.Unmarshal(raw, sc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	sc.index()
	if c.m == nil || len(c.m) >= maxCachedSchemas {
		c.m = map[string]*connectSchema{}
	}
	c.m[string(raw)] = sc
	return sc, nil
}

// field is the schema of struct field name, or nil.
func (c *connectSchema) field(name string) *connectSchema {
	if c == nil {
		return nil
	}
	for i := range c.Fields {
		if c.Fields[i].Field == name {
			return &c.Fields[i]
		}
	}
	return nil
}

// Connect's and Debezium's logical type names.
const (
	lgDecimal       = "org.apache.kafka.connect.data.Decimal"
	lgDate          = "org.apache.kafka.connect.data.Date"
	lgTime          = "org.apache.kafka.connect.data.Time"
	lgTimestamp     = "org.apache.kafka.connect.data.Timestamp"
	lgDbzDate       = "io.debezium.time.Date"
	lgDbzTime       = "io.debezium.time.Time"
	lgMicroTime     = "io.debezium.time.MicroTime"
	lgNanoTime      = "io.debezium.time.NanoTime"
	lgDbzTimestamp  = "io.debezium.time.Timestamp"
	lgMicroTs       = "io.debezium.time.MicroTimestamp"
	lgNanoTs        = "io.debezium.time.NanoTimestamp"
	lgZonedTs       = "io.debezium.time.ZonedTimestamp"
	lgZonedTime     = "io.debezium.time.ZonedTime"
	lgMicroDuration = "io.debezium.time.MicroDuration"
	lgVarDecimal    = "io.debezium.data.VariableScaleDecimal"
	lgBits          = "io.debezium.data.Bits"
	// lgAvroDecimal is an Avro decimal, read by the codec as its text.
	lgAvroDecimal = "avro decimal"
)

// textLogical are logical types whose value is already the text the
// column reads (a string schema): passed as they come.
var textLogical = map[string]bool{
	lgZonedTs: true, lgZonedTime: true,
	"io.debezium.data.Uuid": true, "io.debezium.data.Json": true, "io.debezium.data.Xml": true,
	"io.debezium.data.Enum": true, "io.debezium.data.EnumSet": true, "io.debezium.data.Ltree": true,
	"io.debezium.time.Interval": true, "io.debezium.time.IsoDate": true, "io.debezium.time.IsoTime": true,
	"io.debezium.time.IsoTimestamp": true, "io.debezium.time.Year": true,
}

// logicalError is the cause of a field its logical type says cannot go
// into its column, or whose value does not read as that type.
type logicalError struct {
	field, logical, msg string
}

func (e *logicalError) Error() string {
	return fmt.Sprintf("field %q (logical type %s): %s", e.field, e.logical, e.msg)
}

// schemaText is the staging text of field value v (as serde.JSONFields
// decodes it) whose Connect schema is fs, for a column of type t. ok is
// false when the schema changes nothing (a plain int, string, boolean,
// or a text logical type): the caller reads v as any field. A logical
// type the sink does not know passes its plain value only where the
// column reads that value as itself: a number into a time, date or
// bytea column would mean something else, and is refused.
func schemaText(v any, fs connectSchema, t colType, field string) (text any, ok bool, err error) {
	if v == nil {
		return nil, false, nil
	}
	if fs.Type == "array" && fs.Items != nil {
		return arraySchemaText(v, *fs.Items, t, field)
	}
	decode, known := logicalDecoders[fs.Name]
	switch {
	case fs.Name == "" && fs.Type == "bytes" && t.base == "bytea":
		decode = decodeBytes
	case fs.Name == "", textLogical[fs.Name]:
		return nil, false, nil
	case !known:
		if _, isNum := v.(json.Number); (isNum || fs.Type == "bytes") && (isTimeType(t.base) || t.base == "interval" || t.base == "bytea") {
			return nil, true, &logicalError{field: field, logical: fs.Name,
				msg: fmt.Sprintf("the sink does not decode this logical type, and a %s column would read its plain value %s as something else", t.name, shownValue(v))}
		}
		return nil, false, nil
	}
	text, err = decode(v, fs, t)
	if err != nil {
		return nil, true, &logicalError{field: field, logical: logicalName(fs), msg: err.Error()}
	}
	return text, true, nil
}

// A logicalDecoder reads value v of Connect schema fs as text for a
// column of type t; its error says why it cannot.
type logicalDecoder func(v any, fs connectSchema, t colType) (any, error)

var logicalDecoders = map[string]logicalDecoder{
	lgDecimal:       decodeDecimal,
	lgVarDecimal:    decodeVariableDecimal,
	lgDate:          decodeDate,
	lgDbzDate:       decodeDate,
	lgTime:          clockDecoder(int64(time.Millisecond)),
	lgDbzTime:       clockDecoder(int64(time.Millisecond)),
	lgMicroTime:     clockDecoder(int64(time.Microsecond)),
	lgNanoTime:      clockDecoder(1),
	lgTimestamp:     timestampDecoder(int64(time.Millisecond), "Z"), // Connect's Timestamp is an instant (java.util.Date)
	lgDbzTimestamp:  timestampDecoder(int64(time.Millisecond), ""),  // Debezium's are local times
	lgMicroTs:       timestampDecoder(int64(time.Microsecond), ""),
	lgNanoTs:        timestampDecoder(1, ""),
	lgMicroDuration: decodeMicroDuration,
	lgBits:          decodeBits,
	lgAvroDecimal:   decodeAvroDecimal,
}

func decodeAvroDecimal(v any, _ connectSchema, t colType) (any, error) {
	d, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("want decimal text, got %s", shownValue(v))
	}
	return numberInto(d, t)
}

func decodeBytes(v any, _ connectSchema, t colType) (any, error) {
	b, err := base64Value(v)
	if err != nil {
		return nil, err
	}
	return bytesText(b, t), nil
}

func base64Value(v any) ([]byte, error) {
	str, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("want base64 text, got %s", shownValue(v))
	}
	b, err := base64.StdEncoding.DecodeString(str)
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	return b, nil
}

func decodeDecimal(v any, fs connectSchema, t colType) (any, error) {
	str, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("want base64 text, got %s", shownValue(v))
	}
	scale, err := strconv.Atoi(fs.Parameters["scale"])
	if err != nil {
		return nil, fmt.Errorf("no integer parameter scale (got %q)", fs.Parameters["scale"])
	}
	d, err := decimalText(str, scale)
	if err != nil {
		return nil, err
	}
	return numberInto(d, t)
}

func decodeVariableDecimal(v any, _ connectSchema, t colType) (any, error) {
	raw, _ := v.(json.RawMessage)
	var vs struct {
		Scale *int    `json:"scale"`
		Value *string `json:"value"`
	}
	if json.Unmarshal(raw, &vs) != nil || vs.Scale == nil || vs.Value == nil {
		return nil, fmt.Errorf("want {\"scale\": int, \"value\": base64}, got %s", shownValue(v))
	}
	d, err := decimalText(*vs.Value, *vs.Scale)
	if err != nil {
		return nil, err
	}
	return numberInto(d, t)
}

// Postgres's date range in days since 1970-01-01: 4714-11-24 BC (Julian
// day 0) to 5874897-12-31.
const (
	minDateDays = -2440588
	maxDateDays = 2145042905
)

func decodeDate(v any, _ connectSchema, t colType) (any, error) {
	n, err := integer(v)
	if err != nil {
		return nil, fmt.Errorf("want days since 1970-01-01 as an integer, got %s", shownValue(v))
	}
	if n < minDateDays || n > maxDateDays {
		return nil, fmt.Errorf("%d days since 1970-01-01 is beyond the dates Postgres holds (4714-11-24 BC to 5874897-12-31)", n)
	}
	return timeInto(dateText(time.Unix(0, 0).UTC().AddDate(0, 0, int(n))), t)
}

// clockDecoder reads a time of day counted in units of unit nanoseconds.
func clockDecoder(unit int64) logicalDecoder {
	return func(v any, _ connectSchema, t colType) (any, error) {
		n, err := integer(v)
		if err != nil {
			return nil, fmt.Errorf("want a time of day as an integer, got %s", shownValue(v))
		}
		ns := n * unit
		if n < 0 || ns/unit != n || ns > 24*int64(time.Hour) {
			return nil, fmt.Errorf("%d is no time of day", n)
		}
		return timeInto(clockText(ns), t)
	}
}

// timestampDecoder reads a time since the epoch counted in units of unit
// nanoseconds, as UTC text followed by zone.
func timestampDecoder(unit int64, zone string) logicalDecoder {
	return func(v any, _ connectSchema, t colType) (any, error) {
		n, err := integer(v)
		if err != nil {
			return nil, fmt.Errorf("want a time since the epoch as an integer, got %s", shownValue(v))
		}
		perSecond := int64(time.Second) / unit
		at := time.Unix(n/perSecond, n%perSecond*unit)
		return timeInto(timestampText(at.UTC())+zone, t)
	}
}

func decodeMicroDuration(v any, _ connectSchema, t colType) (any, error) {
	n, err := integer(v)
	if err != nil {
		return nil, fmt.Errorf("want microseconds, got %s", shownValue(v))
	}
	if t.base == "interval" {
		return strconv.FormatInt(n, 10) + " microseconds", nil
	}
	return numberInto(strconv.FormatInt(n, 10), t)
}

// decodeBits reads Debezium's Bits. Debezium writes bit(n) and bit
// varying(n) alike, with parameter length the declared length (2^31-1
// for a bit varying without one), and the BitSet's bytes drop leading
// zeros: only a fixed length says how many there were. So the bits go
// into a bit(n) column (of the length Debezium names, when it names one)
// or, as the BitSet's bytes, a bytea column; any other column is
// refused rather than given a guessed length.
func decodeBits(v any, fs connectSchema, t colType) (any, error) {
	b, err := base64Value(v)
	if err != nil {
		return nil, err
	}
	switch t.base {
	case "bytea":
		return bytesText(b, t), nil
	case "bit":
		return bitsText(b, t, fs.Parameters["length"])
	}
	return nil, fmt.Errorf("a %s column cannot hold bits exactly: Debezium writes bit(n) and bit varying alike and drops leading zeros, so only a bit(n) column (or bytea, for the bytes) says how many bits the value has", t.name)
}

// logicalName is fs's logical type, or its type when it has none.
func logicalName(fs connectSchema) string {
	if fs.Name != "" {
		return fs.Name
	}
	return fs.Type
}

// numberInto is number text d for column type t: a time or bytea column
// cannot hold a number. An integer column takes a decimal whose fraction
// is zeros (a Decimal's scale is its type's, so -3 of scale 2 is
// "-3.00") as the whole number, and refuses any other fraction.
func numberInto(d string, t colType) (any, error) {
	if isTimeType(t.base) || t.base == "bytea" || t.base == "interval" || t.base == "boolean" {
		return nil, fmt.Errorf("a %s column cannot hold the number %s", t.name, d)
	}
	switch t.base {
	case "smallint", "integer", "bigint":
		whole, frac, found := strings.Cut(d, ".")
		if !found {
			return d, nil
		}
		if strings.Trim(frac, "0") != "" {
			return nil, fmt.Errorf("a %s column cannot hold the fraction of %s", t.name, d)
		}
		return whole, nil
	}
	return d, nil
}

// timeInto is time text for column type t: a number or bytea column
// cannot hold a time.
func timeInto(text string, t colType) (any, error) {
	switch t.base {
	case "bytea", "numeric", "smallint", "integer", "bigint", "real", "double precision", "boolean", "money":
		return nil, fmt.Errorf("a %s column cannot hold the time %s", t.name, text)
	}
	return text, nil
}

// integer is v, a JSON number, as an int64.
func integer(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("not a number")
	}
	return strconv.ParseInt(string(n), 10, 64)
}

// decimalText is the decimal text of Connect's Decimal: b64, the base64
// of the unscaled value's big-endian two's-complement bytes
// (BigInteger.toByteArray), and scale.
func decimalText(b64 string, scale int) (string, error) {
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("not base64: %w", err)
	}
	if len(b) == 0 {
		// Connect's Decimal.toLogical refuses it (BigInteger of no bytes).
		return "", fmt.Errorf("no bytes: a decimal's unscaled value has at least one")
	}
	if scale > 1000 || scale < -1000 {
		return "", fmt.Errorf("scale %d is beyond ±1000", scale)
	}
	u := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if scale < 0 {
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-scale)), nil))
		scale = 0
	}
	digits := new(big.Int).Abs(u).String()
	sign := ""
	if u.Sign() < 0 {
		sign = "-"
	}
	if scale == 0 {
		return sign + digits, nil
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:], nil
}

// dateText is t's date as Postgres reads it: a year before 1 is BC
// (Go's year 0 is 1 BC).
func dateText(t time.Time) string {
	y, m, d := t.Date()
	if y <= 0 {
		return fmt.Sprintf("%04d-%02d-%02d BC", 1-y, m, d)
	}
	return fmt.Sprintf("%04d-%02d-%02d", y, m, d)
}

// clockText is ns nanoseconds after midnight as a time of day, with as
// many fraction digits as it needs (24:00:00 is Postgres's end of day).
func clockText(ns int64) string {
	h, ns := ns/int64(time.Hour), ns%int64(time.Hour)
	m, ns := ns/int64(time.Minute), ns%int64(time.Minute)
	s, ns := ns/int64(time.Second), ns%int64(time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", h, m, s) + fraction(ns)
}

// timestampText is t (UTC) as a timestamp's text without a zone.
func timestampText(t time.Time) string {
	y, _, _ := t.Date()
	text := fmt.Sprintf("%04d-%02d-%02dT", abs(y), t.Month(), t.Day()) +
		clockText(int64(t.Hour())*int64(time.Hour)+int64(t.Minute())*int64(time.Minute)+int64(t.Second())*int64(time.Second)+int64(t.Nanosecond()))
	if y <= 0 {
		return fmt.Sprintf("%04d", 1-y) + text[4:] + " BC"
	}
	return text
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// fraction is ns nanoseconds as ".123456789" without trailing zeros; ""
// for 0.
func fraction(ns int64) string {
	if ns == 0 {
		return ""
	}
	return "." + strings.TrimRight(fmt.Sprintf("%09d", ns), "0")
}

// bitsText is Debezium's Bits, b (java.util.BitSet.toByteArray: little
// endian, bit 0 the rightmost), as the bit string of bit(n) column t.
// The length parameter, when set, must be n: it is read only to compare,
// never to size anything (a bit varying's is 2^31-1).
func bitsText(b []byte, t colType, length string) (string, error) {
	n := int(t.mod) // atttypmod of bit(n) is n
	if n <= 0 {
		n = 1
	}
	if length != "" && length != strconv.Itoa(n) {
		return "", fmt.Errorf("parameter length %.20q is not the %d bits of a %s column (a bit varying source, or another length)", length, n, t.name)
	}
	be := make([]byte, len(b))
	for i, c := range b {
		be[len(b)-1-i] = c
	}
	s := new(big.Int).SetBytes(be).Text(2)
	if s == "0" {
		s = ""
	}
	if len(s) > n {
		return "", fmt.Errorf("%d bits do not fit its length %d", len(s), n)
	}
	return strings.Repeat("0", n-len(s)) + s, nil
}

// arraySchemaText is a JSON array field v whose elements have schema
// items, as an array literal of the elements' texts; ok is false when
// the items' schema changes nothing.
func arraySchemaText(v any, items connectSchema, t colType, field string) (any, bool, error) {
	elem, isArray := arrayElement(t)
	raw, _ := v.(json.RawMessage)
	if items.Name == "" && !(items.Type == "bytes" && elem.base == "bytea") {
		return nil, false, nil
	}
	if !isArray || len(raw) == 0 || raw[0] != '[' {
		return nil, true, &logicalError{field: field, logical: "array of " + logicalName(items), msg: fmt.Sprintf("a %s column cannot hold an array", t.name)}
	}
	var els []json.RawMessage
	if err := json.Unmarshal(raw, &els); err != nil {
		return nil, true, err
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range els {
		if i > 0 {
			b.WriteByte(',')
		}
		ev, err := elementValue(e)
		if err != nil {
			return nil, true, err
		}
		text, ok, err := schemaText(ev, items, elem, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, true, err
		}
		if !ok {
			text = ev
			if n, isNum := ev.(json.Number); isNum {
				text = string(n)
			}
		}
		s, isText := text.(string)
		if !isText {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), true, nil
}

// elementValue decodes an array element as serde.FieldValue does.
func elementValue(e json.RawMessage) (any, error) {
	switch {
	case string(e) == "null":
		return nil, nil
	case e[0] == '"':
		var s string
		err := json.Unmarshal(e, &s)
		return s, err
	case e[0] == '{' || e[0] == '[':
		return e, nil
	}
	return json.Number(e), nil
}

// envelopeSchema is the Connect schema of a change event value (with
// schemas.enable, {"schema": ..., "payload": body}); nil when value is
// the event itself.
func (s *Sink) envelopeSchema(value, body []byte) (*connectSchema, error) {
	if len(body) == len(value) {
		return nil, nil
	}
	raw, _, found, _ := serde.TopLevelField(value, "schema")
	if !found || len(raw) == 0 || raw[0] != '{' {
		return nil, nil
	}
	return s.typed.schemas.parse(raw)
}

// avroConnectSchemas are the Connect logical types (connect.name) of the
// fields of record field rec ("after" or "before") of Avro change event
// r, by field name, for fields whose Avro type has no logical type of its
// own: with Confluent's AvroConverter, Debezium's time types are plain
// longs named so, and a VariableScaleDecimal a record. Decimal, Date,
// Time and Timestamp are Avro logical types there, which the codec reads.
// nil when the schema names none, or cannot be read.
func (s *Sink) avroConnectSchemas(r *kgo.Record, rec string) map[string]connectSchema {
	id := -1
	if len(r.Value) >= 5 && r.Value[0] == 0 {
		id = int(binary.BigEndian.Uint32(r.Value[1:5]))
	}
	s.typed.connectMu.Lock()
	defer s.typed.connectMu.Unlock()
	key := fmt.Sprintf("%d/%s", id, rec)
	if m, ok := s.typed.connect[key]; ok {
		return m
	}
	rs, err := serde.ValueSchema(s.codec, r.Value)
	if err != nil {
		return nil // the decode already passed: a registry hiccup; read plain values as before
	}
	var m map[string]connectSchema
	for _, f := range rs.Fields {
		if f.Name != rec {
			continue
		}
		for _, ff := range f.Type.Fields {
			cs, ok := avroConnectSchema(ff.Type)
			if !ok {
				continue
			}
			if m == nil {
				m = map[string]connectSchema{}
			}
			m[ff.Name] = cs
		}
	}
	if s.typed.connect == nil {
		s.typed.connect = map[string]map[string]connectSchema{}
	}
	s.typed.connect[key] = m
	return m
}

// avroConnectSchema is the Connect schema schemaText reads an Avro field
// of type ft by: its connect.name, when it has no Avro logical type; an
// Avro decimal (which the codec reads as decimal text) as lgAvroDecimal;
// an array whose items have either, or are bytes, element by element.
// ok is false when the field is read as its plain value.
func avroConnectSchema(ft serde.FieldType) (connectSchema, bool) {
	switch {
	case ft.Logical == "decimal":
		return connectSchema{Type: "string", Name: lgAvroDecimal}, true
	case ft.Kind == "array" && ft.Items != nil:
		items, ok := avroConnectSchema(*ft.Items)
		if !ok && ft.Items.Kind == "bytes" && ft.Items.Logical == "" {
			items, ok = connectSchema{Type: "bytes"}, true
		}
		if !ok {
			return connectSchema{}, false
		}
		return connectSchema{Type: "array", Items: &items}, true
	case ft.Connect != "" && ft.Logical == "":
		return connectSchema{Type: ft.Kind, Name: ft.Connect, Parameters: ft.ConnectParameters}, true
	}
	return connectSchema{}, false
}

// connectValues turns the Avro values of obj's fields that sch names into
// the JSON converter's forms that schemaText reads: a number as its
// text, bytes as base64, a record as JSON.
func connectValues(obj map[string]any, sch map[string]connectSchema) error {
	for name := range sch {
		switch v := obj[name].(type) {
		case int64:
			obj[name] = json.Number(strconv.FormatInt(v, 10))
		case int32:
			obj[name] = json.Number(strconv.FormatInt(int64(v), 10))
		case []byte:
			obj[name] = base64.StdEncoding.EncodeToString(v)
		case map[string]any, []any:
			b, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("field %q: %w", name, err)
			}
			obj[name] = json.RawMessage(b)
		}
	}
	return nil
}
