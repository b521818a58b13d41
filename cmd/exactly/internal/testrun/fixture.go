// Package testrun backs `exactly test`: it runs a topology's stages on an
// embedded Kafka cluster (franz-go's kfake, no network) against a fixture
// file, the input records per topic and the output and dead-letter records
// expected, and reports every difference.
//
// A fixture file:
//
//	input:                         # records produced, in this order, before the stages start
//	  orders.raw:
//	    - { key: k-1, value: '{"event_id":"e-1"}', headers: { source: web } }
//	    - { value: null }           # a null value (a tombstone); no key means a null key
//	    - { value_base64: /w== }    # bytes that are not UTF-8
//	output:                        # expected records, per topic a stage writes
//	  orders.clean:
//	    - { key: e-1, value: '{"event_id":"e-1"}', headers: { source: web } }
//	dead_letters:                  # expected dead letters, per dead-letter topic
//	  orders.dlq:
//	    - { reason: decode, value: null }
//
// Every topic a stage writes (outputs, route targets, dead-letter topics)
// is compared; one the fixture does not list must stay empty. Records are
// compared in input order: an output sorts by the input record it came
// from (its lineage headers, followed through chained stages), then by its
// position among that input's outputs, so a fixture lists them the way a
// reader follows the input.
//
// Compared byte for byte: keys and values (null differs from empty), and
// the headers whose names do not start with "exactly." (the input's
// headers travel on, and transforms add their own). Of a dead letter also
// its exactly.dlq.reason. Not compared: partitions, offsets, timestamps,
// the lineage headers (exactly.stage, exactly.source.*) and the other
// exactly.dlq.* headers (stage, source topic, partition, offset and
// timestamp, and the error and step texts, which the diff shows but which
// change with library versions).
package testrun

import (
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/exactly-io/exactly/topology"
)

// Fixture is a decoded fixture file.
type Fixture struct {
	Path        string
	Input       []TopicRecords
	Output      []TopicRecords
	DeadLetters []TopicRecords
}

// TopicRecords are the records of one topic, in the file's order.
type TopicRecords struct {
	Topic   string
	Records []Record
}

// Record is one record of a fixture. A nil Key or Value is null.
type Record struct {
	Key, Value []byte
	Headers    []Header
	Partition  int32 // input: the partition to produce to; -1 lets the producer choose by key
	// Timestamp is an input's record timestamp (event time); zero lets
	// the producer set the time of producing.
	Timestamp time.Time
	Reason    string // dead letters: exactly.dlq.reason
	Line      int    // where the record is written
}

// Header is a record header.
type Header struct{ Key, Value string }

// Load reads and decodes the fixture file at path. Errors name
// path:line:col.
func Load(path string) (*Fixture, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load fixture: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes a fixture; name is used in messages. Every problem found
// is reported, one a line.
func Parse(name string, data []byte) (*Fixture, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, topology.SyntaxError(name, data, err)
	}
	p := &parser{file: name}
	fx := &Fixture{Path: name}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: a fixture is a mapping with input, output and dead_letters", name)
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "input":
			fx.Input = p.topics(v, "input", kindInput)
		case "output":
			fx.Output = p.topics(v, "output", kindOutput)
		case "dead_letters":
			fx.DeadLetters = p.topics(v, "dead_letters", kindDeadLetter)
		default:
			p.errorf(k, k.Value, "unknown field (valid: input, output, dead_letters)")
		}
	}
	if fx.Input == nil && len(p.errs) == 0 {
		p.errorf(root, "input", "required: the records to produce, per topic")
	}
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(p.errs, "\n"))
	}
	return fx, nil
}

type recordKind int

const (
	kindInput recordKind = iota
	kindOutput
	kindDeadLetter
)

type parser struct {
	file string
	errs []string
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf("%s:%d:%d: %s: %s", p.file, n.Line, n.Column, path, fmt.Sprintf(format, args...)))
}

func (p *parser) topics(n *yaml.Node, path string, kind recordKind) []TopicRecords {
	out := []TopicRecords{}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "expected a mapping of topic to records")
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		tp := path + "." + k.Value
		if slices.ContainsFunc(out, func(t TopicRecords) bool { return t.Topic == k.Value }) {
			p.errorf(k, tp, "topic listed twice")
			continue
		}
		tr := TopicRecords{Topic: k.Value, Records: []Record{}}
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, tp, "expected a sequence of records ([] for none)")
			continue
		}
		for j, rn := range v.Content {
			if r, ok := p.record(rn, fmt.Sprintf("%s[%d]", tp, j), kind); ok {
				tr.Records = append(tr.Records, r)
			}
		}
		out = append(out, tr)
	}
	return out
}

var fieldNames = map[recordKind][]string{
	kindInput:      {"key", "key_base64", "value", "value_base64", "headers", "partition", "timestamp"},
	kindOutput:     {"key", "key_base64", "value", "value_base64", "headers"},
	kindDeadLetter: {"reason", "key", "key_base64", "value", "value_base64", "headers"},
}

func (p *parser) record(n *yaml.Node, path string, kind recordKind) (Record, bool) {
	r := Record{Partition: -1, Line: n.Line}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "expected a record mapping (key, value, headers)")
		return r, false
	}
	ok := true
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fp := path + "." + k.Value
		if !slices.Contains(fieldNames[kind], k.Value) {
			p.errorf(k, fp, "unknown field (valid: %s)", strings.Join(fieldNames[kind], ", "))
			ok = false
			continue
		}
		seen[k.Value] = true
		ok = p.field(&r, k.Value, v, fp) && ok
	}
	return r, p.fieldsComplete(n, path, kind, seen) && ok
}

// field reads field name of a record, with value v (at path fp), into r.
func (p *parser) field(r *Record, name string, v *yaml.Node, fp string) bool {
	switch name {
	case "key", "value", "key_base64", "value_base64":
		b, good := p.bytes(v, fp, strings.HasSuffix(name, "_base64"))
		if strings.HasPrefix(name, "key") {
			r.Key = b
		} else {
			r.Value = b
		}
		return good
	case "headers":
		hs, good := p.headers(v, fp)
		r.Headers = append(r.Headers, hs...)
		return good
	case "partition":
		n, err := strconv.ParseInt(v.Value, 10, 32)
		r.Partition = int32(n)
		if v.Kind != yaml.ScalarNode || err != nil || n < 0 {
			p.errorf(v, fp, "expected a partition number (0 or more)")
			return false
		}
	case "timestamp":
		ts, err := time.Parse(time.RFC3339Nano, v.Value)
		r.Timestamp = ts
		if v.Kind != yaml.ScalarNode || err != nil {
			p.errorf(v, fp, "expected an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)")
			return false
		}
	case "reason":
		r.Reason = v.Value
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			p.errorf(v, fp, "expected the dead-letter reason (decode, transform, key, encode, produce)")
			return false
		}
	}
	return true
}

// headers reads a record's headers, a mapping of name to value at path.
func (p *parser) headers(v *yaml.Node, path string) ([]Header, bool) {
	if v.Kind != yaml.MappingNode {
		p.errorf(v, path, "expected a mapping of header name to value")
		return nil, false
	}
	var hs []Header
	ok := true
	for j := 0; j+1 < len(v.Content); j += 2 {
		hk, hv := v.Content[j], v.Content[j+1]
		if hv.Kind != yaml.ScalarNode {
			p.errorf(hv, path+"."+hk.Value, "expected a string")
			ok = false
			continue
		}
		hs = append(hs, Header{Key: hk.Value, Value: hv.Value})
	}
	return hs, ok
}

// fieldsComplete checks the fields seen of record n (at path) of this
// kind together: a key or value given once, a dead letter's reason given.
func (p *parser) fieldsComplete(n *yaml.Node, path string, kind recordKind, seen map[string]bool) bool {
	ok := true
	for _, f := range []string{"key", "value"} {
		if seen[f] && seen[f+"_base64"] {
			p.errorf(n, path, "give %s or %s_base64, not both", f, f)
			ok = false
		}
	}
	if kind == kindDeadLetter && !seen["reason"] {
		p.errorf(n, path+".reason", "required (the exactly.dlq.reason header: decode, transform, key, encode or produce)")
		ok = false
	}
	return ok
}

// bytes decodes a key or value: null (or ~) is nil, anything else the
// scalar's text, or the bytes it encodes in base64.
func (p *parser) bytes(n *yaml.Node, path string, b64 bool) ([]byte, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, path, "expected a string or null (write JSON values in quotes: '{\"a\":1}')")
		return nil, false
	}
	if n.ShortTag() == "!!null" {
		return nil, true
	}
	if !b64 {
		return append([]byte{}, n.Value...), true
	}
	b, err := base64.StdEncoding.DecodeString(n.Value)
	if err != nil {
		p.errorf(n, path, "invalid base64: %v", err)
		return nil, false
	}
	return append([]byte{}, b...), true
}
