package serde

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/linkedin/goavro/v2"
)

// avroType is a parsed Avro schema (https://avro.apache.org/docs/1.12.0/specification/).
// goavro encodes and decodes the binary form; avroType drives what goavro
// does not do for us: logical types, conversion to and from the in-memory
// representation, and writer -> reader resolution.
type avroType struct {
	kind    avroKind
	name    string   // full name of a named type
	aliases []string // full names
	logical avroLogical
	// precision and scale of a decimal.
	precision, scale int
	size             int // of a fixed
	fields           []*avroField
	symbols          []string
	enumDefault      *string
	items, values    *avroType
	branches         []*avroType
	// connect and connectParams are Kafka Connect's logical type of the
	// value (connect.name, connect.parameters), as its AvroConverter
	// writes them: Debezium's MicroTimestamp is a plain long named so.
	connect       string
	connectParams map[string]string
}

type avroField struct {
	name    string
	aliases []string
	typ     *avroType
	def     any // JSON default, decoded with UseNumber
	hasDef  bool
}

// unionName is how goavro names the branch of a union holding t.
func (t *avroType) unionName() string {
	if t.name != "" {
		return t.name
	}
	return t.kind.String()
}

// avroSchema is a parsed schema with its goavro codec. goavro gets the
// schema without its logicalType attributes: the binary form is the same, and
// we convert logical values ourselves, exactly (goavro rounds decimals and
// turns timestamps into time.Time).
type avroSchema struct {
	text  string // as written, registered with the registry
	typ   *avroType
	codec *goavro.Codec
}

// parseSchemaText parses text, an Avro schema, into its tree, its parser
// (which holds what it ignored) and its JSON with the logicalType keys and
// the field defaults removed: the physical schema, which goavro gets.
func parseSchemaText(text string) (*avroType, *schemaParser, any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, nil, fmt.Errorf("schema is not JSON: %v", err)
	}
	p := &schemaParser{named: make(map[string]*avroType)}
	t, err := p.parse(raw, "")
	if err == nil {
		err = p.checkDefaults()
	}
	return t, p, raw, err
}

func newAvroSchema(text string) (*avroSchema, error) {
	t, _, raw, err := parseSchemaText(text)
	if err != nil {
		return nil, err
	}
	var physical bytes.Buffer
	enc := json.NewEncoder(&physical)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(raw); err != nil { // raw had its logicalType keys removed by parse
		return nil, err
	}
	codec, err := goavro.NewCodec(physical.String())
	if err != nil {
		return nil, fmt.Errorf("invalid schema: %v", err)
	}
	return &avroSchema{text: text, typ: t, codec: codec}, nil
}

type schemaParser struct {
	named map[string]*avroType
	depth int
	// ignored says, for each logical type of the specification that the
	// schema gives where it is invalid, what is read instead.
	ignored []string
	// defaulted are the records, whose field defaults are checked once
	// the whole schema is parsed (a record may name itself).
	defaulted []*avroType
}

// checkDefaults checks each field default against its type as the
// specification reads defaults (defaultValue), naming the field of the
// first that is invalid.
func (p *schemaParser) checkDefaults() error {
	for _, r := range p.defaulted {
		for _, f := range r.fields {
			if !f.hasDef {
				continue
			}
			if _, err := defaultValue(f.typ, f.def); err != nil {
				return fmt.Errorf("record %q field %q: invalid default: %v", r.name, f.name, err)
			}
		}
	}
	return nil
}

func fullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

// namespaceOf returns the namespace a named type gives to the types it
// encloses.
func namespaceOf(full string) string {
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		return full[:i]
	}
	return ""
}

func (p *schemaParser) parse(v any, ns string) (*avroType, error) {
	if p.depth++; p.depth > 512 {
		return nil, fmt.Errorf("schema nested too deeply")
	}
	defer func() { p.depth-- }()
	switch v := v.(type) {
	case string:
		if k, ok := parsePrimitive(v); ok {
			return &avroType{kind: k}, nil
		}
		if t, ok := p.named[fullName(v, ns)]; ok {
			return t, nil
		}
		if t, ok := p.named[v]; ok {
			return t, nil
		}
		return nil, fmt.Errorf("unknown type %q", v)
	case []any:
		return p.parseUnion(v, ns)
	case map[string]any:
		return p.parseObject(v, ns)
	}
	return nil, fmt.Errorf("invalid schema element %v", v)
}

func (p *schemaParser) parseUnion(v []any, ns string) (*avroType, error) {
	u := &avroType{kind: kindUnion}
	for _, b := range v {
		bt, err := p.parse(b, ns)
		if err != nil {
			return nil, err
		}
		if bt.kind == kindUnion {
			return nil, fmt.Errorf("a union must not hold a union")
		}
		u.branches = append(u.branches, bt)
	}
	if len(u.branches) == 0 {
		return nil, fmt.Errorf("empty union")
	}
	return u, nil
}

func (p *schemaParser) parseObject(m map[string]any, ns string) (*avroType, error) {
	name, ok := m["type"].(string)
	if !ok {
		if m["type"] == nil {
			return nil, fmt.Errorf("schema object without a type")
		}
		return p.parse(m["type"], ns) // {"type": {"type": ...}} or {"type": [...]}
	}
	logical, _ := m["logicalType"].(string)
	delete(m, "logicalType") // goavro sees the physical schema only; see avroSchema
	kind, ok := parseKind(name)
	if !ok || kind == kindUnion {
		if nt, ok := p.named[fullName(name, ns)]; ok {
			return nt, nil
		}
		return nil, fmt.Errorf("unknown type %q", name)
	}
	t := &avroType{kind: kind}
	if err := p.parseAttrs(t, name, m, ns); err != nil {
		return nil, err
	}
	if why := t.setLogical(logical, m); why != "" {
		p.ignored = append(p.ignored, why)
	}
	t.connect, _ = m["connect.name"].(string)
	if ps, ok := m["connect.parameters"].(map[string]any); ok {
		t.connectParams = make(map[string]string, len(ps))
		for k, v := range ps {
			t.connectParams[k], _ = v.(string)
		}
	}
	return t, nil
}

// parseAttrs sets what the attributes of m give to t, of kind name: a
// named type's name, a record's fields, an enum's symbols, a fixed's size,
// an array's items, a map's values.
func (p *schemaParser) parseAttrs(t *avroType, name string, m map[string]any, ns string) error {
	var err error
	switch t.kind {
	case kindRecord:
		if ns, err = p.define(t, name, m, ns); err == nil {
			err = p.parseFields(t, m, ns)
		}
	case kindEnum:
		if _, err = p.define(t, name, m, ns); err == nil {
			err = parseSymbols(t, m)
		}
	case kindFixed:
		if _, err = p.define(t, name, m, ns); err == nil {
			err = parseSize(t, m)
		}
	case kindArray:
		t.items, err = p.parse(m["items"], ns)
	case kindMap:
		t.values, err = p.parse(m["values"], ns)
	}
	return err
}

// define names t, a record, enum or fixed of kind name ("error" for a
// record), and registers it; it returns the namespace t gives to the
// types it encloses.
func (p *schemaParser) define(t *avroType, kind string, m map[string]any, ns string) (string, error) {
	name, _ := m["name"].(string)
	if name == "" {
		return "", fmt.Errorf("%s without a name", kind)
	}
	if n, ok := m["namespace"].(string); ok && !strings.Contains(name, ".") {
		ns = n
	}
	t.name = fullName(name, ns)
	if _, dup := p.named[t.name]; dup {
		return "", fmt.Errorf("type %q defined twice", t.name)
	}
	p.named[t.name] = t // before the fields: records may be recursive
	t.aliases = aliasesOf(m, namespaceOf(t.name))
	return namespaceOf(t.name), nil
}

func (p *schemaParser) parseFields(t *avroType, m map[string]any, ns string) error {
	fs, _ := m["fields"].([]any)
	if fs == nil {
		return fmt.Errorf("record %q without fields", t.name)
	}
	seen := make(map[string]bool, len(fs))
	for _, f := range fs {
		fm, ok := f.(map[string]any)
		if !ok {
			return fmt.Errorf("record %q: a field must be an object", t.name)
		}
		name, _ := fm["name"].(string)
		if name == "" || seen[name] {
			return fmt.Errorf("record %q: missing or duplicate field name %q", t.name, name)
		}
		seen[name] = true
		ft, err := p.parse(fm["type"], ns)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t.name, name, err)
		}
		def, hasDef := fm["default"]
		if hasDef {
			// goavro reads a bytes or fixed default as the string's UTF-8
			// bytes, not as the specification's code points 0-255 (fixed(2)
			// "\u00ff\u00fe" refused, fixed(4) accepted). It never needs a
			// default (toAvroRecord gives it every field), so it gets none:
			// checkDefaults and defaultNative read them, as the
			// specification does.
			delete(fm, "default")
		}
		t.fields = append(t.fields, &avroField{name: name, aliases: aliasesOf(fm, ""), typ: ft, def: def, hasDef: hasDef})
	}
	p.defaulted = append(p.defaulted, t)
	return nil
}

func parseSymbols(t *avroType, m map[string]any) error {
	syms, _ := m["symbols"].([]any)
	for _, s := range syms {
		str, ok := s.(string)
		if !ok {
			return fmt.Errorf("enum %q: symbols must be strings", t.name)
		}
		t.symbols = append(t.symbols, str)
	}
	if d, ok := m["default"].(string); ok {
		t.enumDefault = &d
	}
	return nil
}

func parseSize(t *avroType, m map[string]any) error {
	n, err := intAttr(m, "size")
	if err != nil || n < 0 {
		return fmt.Errorf("fixed %q: invalid size", t.name)
	}
	t.size = n
	return nil
}

// setLogical keeps a logical type only where it is valid: the
// specification says an invalid one is ignored and the underlying type
// used ("Logical Types", Avro 1.11 specification). For a logical type of
// the specification that it ignores, it says why; "" otherwise (a valid
// one, none, or one the specification does not define, which any reader
// ignores).
func (t *avroType) setLogical(name string, m map[string]any) string {
	logical, ok := parseLogical(name)
	if !ok {
		return ""
	}
	why := ""
	switch logical {
	case logicalDecimal:
		why = t.setDecimal(m)
	case logicalUUID:
		if t.kind != kindString && (t.kind != kindFixed || t.size != 16) {
			why = "it needs string or a fixed of 16 bytes"
		}
	case logicalDate, logicalTimeMillis:
		if t.kind != kindInt {
			why = "it needs int"
		}
	default:
		if t.kind != kindLong {
			why = "it needs long"
		}
	}
	if why == "" {
		t.logical = logical
		return ""
	}
	what := t.kind.String()
	if t.name != "" {
		what = fmt.Sprintf("%s %q", t.kind, t.name)
	}
	return fmt.Sprintf("logicalType %q on %s is ignored, as the Avro specification says of an invalid one (%s): its values are read as plain %s", name, what, why, t.kind)
}

// setDecimal sets the precision and scale of a decimal of t from m, and
// says why the decimal is invalid; "" when it is valid.
func (t *avroType) setDecimal(m map[string]any) string {
	prec, err1 := intAttr(m, "precision")
	scale := 0
	var err2 error
	if _, has := m["scale"]; has {
		scale, err2 = intAttr(m, "scale")
	}
	t.precision, t.scale = prec, scale
	switch {
	case t.kind != kindBytes && t.kind != kindFixed:
		return "it needs bytes or fixed"
	case err1 != nil || prec <= 0:
		return "its precision must be an integer of at least 1"
	case err2 != nil || scale < 0 || scale > prec:
		return fmt.Sprintf("its scale must be an integer from 0 to the precision %d", prec)
	}
	if most := maxFixedPrecision(t.size); t.kind == kindFixed && prec > most {
		return fmt.Sprintf("precision %d does not fit in a fixed of %d bytes, which holds at most %d digits", prec, t.size, most)
	}
	return ""
}

// maxFixedPrecision is floor(log10(2^(8n-1) - 1)), the most digits a fixed
// of n bytes holds.
func maxFixedPrecision(n int) int {
	if n <= 0 || n > 1<<20 {
		return 0
	}
	return int(math.Floor(float64(8*n-1) * math.Log10(2)))
}

func intAttr(m map[string]any, key string) (int, error) {
	n, ok := m[key].(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s is not a number", key)
	}
	i, err := n.Int64()
	if err != nil || i > math.MaxInt32 || i < math.MinInt32 {
		return 0, fmt.Errorf("%s is not an integer", key)
	}
	return int(i), nil
}

func aliasesOf(m map[string]any, ns string) []string {
	as, _ := m["aliases"].([]any)
	var out []string
	for _, a := range as {
		if s, ok := a.(string); ok {
			out = append(out, fullName(s, ns))
		}
	}
	return out
}

// shortName drops the namespace.
func shortName(full string) string {
	return full[strings.LastIndexByte(full, '.')+1:]
}

// namesMatch reports whether a reader named type r accepts the writer's w,
// by full or unqualified name or by one of r's aliases (spec: "Schema
// Resolution").
func namesMatch(w, r *avroType) bool {
	if w.name == r.name || shortName(w.name) == shortName(r.name) {
		return true
	}
	for _, a := range r.aliases {
		if a == w.name || shortName(a) == shortName(w.name) {
			return true
		}
	}
	return false
}

// bigPow10 returns 10^n.
func bigPow10(n int) *big.Int {
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}

// CheckSchema reports whether text is an Avro schema that an Avro codec
// accepts (the specification's rules and the logical types this package
// implements), without building a codec: topology's validation uses it,
// so that `exactly validate` refuses what a stage or sink would refuse at
// start. The error says what is wrong.
func CheckSchema(text []byte) error {
	_, err := newAvroSchema(string(text))
	return err
}

// SchemaWarnings returns what text, an Avro schema, declares that a reader
// ignores: each logical type of the specification given where it is
// invalid (a decimal whose precision does not fit its fixed size, a date
// on a long), whose values are then read as the plain underlying type.
// Nil when there is none or text is not a valid schema (CheckSchema says
// why).
func SchemaWarnings(text []byte) []string {
	_, p, _, err := parseSchemaText(string(text))
	if err != nil {
		return nil
	}
	return p.ignored
}

// SchemaFieldNames returns the names of the fields of text, an Avro
// record schema, in order; nil when text is not a record schema.
func SchemaFieldNames(text []byte) []string {
	s, err := newAvroSchema(string(text))
	if err != nil || s.typ.kind != kindRecord {
		return nil
	}
	names := make([]string, len(s.typ.fields))
	for i, f := range s.typ.fields {
		names[i] = f.name
	}
	return names
}
