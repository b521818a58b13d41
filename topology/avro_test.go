package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// avroDir writes a topology file's directory with schemas/order.avsc and
// returns the topology path.
func avroDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "schemas"), 0o755); err != nil {
		t.Fatal(err)
	}
	schema := `{"type":"record","name":"Order","fields":[{"name":"event_id","type":"string"}]}`
	if err := os.WriteFile(filepath.Join(dir, "schemas", "order.avsc"), []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schemas", "bad.avsc"), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	// JSON, but no Avro schema a codec accepts: validate refuses it, so run
	// does not find it first.
	for name, text := range map[string]string{
		"typo.avsc":       `{"type":"record","name":"R","fields":[{"name":"a","type":"strin"}]}`,
		"baddefault.avsc": `{"type":"record","name":"R","fields":[{"name":"a","type":"string","default":5}]}`,
		// Valid schemas whose logical types a reader ignores.
		"ignored.avsc": `{"type":"record","name":"R","fields":[` +
			`{"name":"a","type":{"type":"fixed","name":"Amount","size":4,"logicalType":"decimal","precision":20,"scale":2}},` +
			`{"name":"d","type":{"type":"long","logicalType":"date"}},` +
			`{"name":"c","type":{"type":"string","logicalType":"my-own"}}]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, "schemas", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "topology.yaml")
}

func TestParseAvro(t *testing.T) {
	path := avroDir(t)
	src := head + `stages:
  - name: s
    input:
      topic: in
      format: avro
      registry:
        url: ${SR_URL}
        reader_schema: schemas/order.avsc
        username: svc
        password: ${SR_PASSWORD}
    output:
      topic: out
      format: avro
      schema: schemas/order.avsc
      registry: { url: "${SR_URL}", subject: orders-v }
    dead_letter: { topic: dlq }
`
	f, err := Parse(path, []byte(src), env(map[string]string{"SR_URL": "https://sr.internal:8081", "SR_PASSWORD": "hunter2"}))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Stages[0]
	want := Endpoint{Topic: "in", Format: "avro", Registry: Registry{
		URL: "https://sr.internal:8081", ReaderSchema: "schemas/order.avsc", Username: "svc", Password: "hunter2",
	}}
	if !reflect.DeepEqual(s.Input, want) {
		t.Fatalf("input = %#v, want %#v", s.Input, want)
	}
	if got := f.Resolve(s.Output.Schema); got != filepath.Join(filepath.Dir(path), "schemas", "order.avsc") {
		t.Fatalf("Resolve = %s", got)
	}
	if s.Output.Registry.Subject != "orders-v" {
		t.Fatalf("subject = %q", s.Output.Registry.Subject)
	}
}

func TestParseAvroValidation(t *testing.T) {
	path := avroDir(t)
	tests := []struct {
		name   string
		in     string // the stage's input and output lines (lines 10 and 11)
		env    map[string]string
		want   []string // messages without "file:"
		hidden string   // must appear in no message
	}{
		{"raw avro file both ways",
			`{ topic: in, format: avro, schema: schemas/order.avsc }`,
			nil, nil, ""},
		{"avro input without schema or registry",
			`{ topic: in, format: avro }`,
			nil, []string{"10:12: stages[0].input: format avro needs schema: path/to/file.avsc (raw Avro) or registry: { url: ... } (Confluent wire format)"}, ""},
		{"schema file missing",
			`{ topic: in, format: avro, schema: schemas/nope.avsc }`,
			nil, []string{`10:47: stages[0].input.schema: cannot read schema file "schemas/nope.avsc" (relative paths start at the topology file's directory)`}, ""},
		{"schema file not JSON",
			`{ topic: in, format: avro, schema: schemas/bad.avsc }`,
			nil, []string{`10:47: stages[0].input.schema: schema file "schemas/bad.avsc" is not JSON (want an Avro schema, .avsc)`}, ""},
		{"schema file with an unknown type",
			`{ topic: in, format: avro, schema: schemas/typo.avsc }`,
			nil, []string{`10:47: stages[0].input.schema: schema file "schemas/typo.avsc" is not a valid Avro schema: R.a: unknown type "strin"`}, ""},
		{"schema file with a default of the wrong type",
			`{ topic: in, format: avro, schema: schemas/baddefault.avsc }`,
			nil, []string{`10:47: stages[0].input.schema: schema file "schemas/baddefault.avsc" is not a valid Avro schema: record "R" field "a": invalid default: a string default is a JSON string, not an integer`}, ""},
		{"schema on json",
			`{ topic: in, schema: schemas/order.avsc }`,
			nil, []string{`10:33: stages[0].input.schema: only for format avro (format is "json")`}, ""},
		{"input with schema and registry",
			`{ topic: in, format: avro, schema: schemas/order.avsc, registry: { url: "http://sr:8081" } }`,
			nil, []string{"10:47: stages[0].input.schema: an input with a registry reads each record with the writer schema named by its ID; set registry.reader_schema to resolve it to your own schema instead"}, ""},
		{"registry without url",
			`{ topic: in, format: avro, registry: { reader_schema: schemas/order.avsc } }`,
			nil, []string{"10:49: stages[0].input.registry.url: required (e.g. url: ${SCHEMA_REGISTRY_URL})"}, ""},
		{"bad url from env is not shown",
			`{ topic: in, format: avro, registry: { url: "${SR}" } }`,
			map[string]string{"SR": "sr.internal:8081"}, []string{"10:56: stages[0].input.registry.url: invalid registry URL (want http(s)://host[:port][/path])"}, "sr.internal"},
		{"credentials in the url are refused and not shown",
			`{ topic: in, format: avro, registry: { url: "https://bob:s3cret@sr:8081" } }`,
			nil, []string{"10:56: stages[0].input.registry.url: credentials in the URL are not allowed (use registry.username and registry.password: ${VAR})"}, "s3cret"},
		{"subject on input, password without username",
			`{ topic: in, format: avro, registry: { url: "http://sr", subject: x, password: "${P}" } }`,
			map[string]string{"P": "pw"}, []string{
				"10:78: stages[0].input.registry.subject: only for outputs (an input finds each record's schema by the ID in its frame)",
				"10:91: stages[0].input.registry.password: needs registry.username",
			}, ""},
		{"unset env in url",
			`{ topic: in, format: avro, registry: { url: "${NOPE}" } }`,
			nil, []string{`10:56: stages[0].input.registry.url: environment variable "NOPE" is not set`}, ""},
		{"unknown registry field",
			`{ topic: in, format: avro, registry: { url: "http://sr", token: x } }`,
			nil, []string{"10:69: stages[0].input.registry.token: unknown field (valid: url, subject, reader_schema, username, password, password_file, ca_file, insecure_skip_verify)"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := head + "stages:\n  - name: s\n    input: " + tc.in + "\n    output: { topic: out }\n    dead_letter: { topic: dlq }\n"
			_, err := Parse(path, []byte(src), env(tc.env))
			got := messages(t, err)
			for i := range got {
				got[i] = strings.TrimPrefix(got[i], path+":")
				if tc.hidden != "" && strings.Contains(got[i], tc.hidden) {
					t.Errorf("message shows %q: %s", tc.hidden, got[i])
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// A logical type of the Avro specification given where it is invalid is
// ignored by every reader (the specification says so), which reads the
// plain underlying type: validate warns, naming the type and why, and
// says nothing of a logical type the specification does not define.
func TestParseAvroIgnoredLogicalTypesWarn(t *testing.T) {
	path := avroDir(t)
	src := head + "stages:\n  - name: s\n    input: { topic: in, format: avro, schema: schemas/ignored.avsc }\n    output: { topic: out }\n    dead_letter: { topic: dlq }\n"
	f, err := Parse(path, []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range f.Warnings() {
		got = append(got, strings.TrimPrefix(w.Error(), path+":"))
	}
	want := []string{
		`10:47: stages[0].input.schema: schema file "schemas/ignored.avsc": logicalType "decimal" on fixed "Amount" is ignored, as the Avro specification says of an invalid one (precision 20 does not fit in a fixed of 4 bytes, which holds at most 9 digits): its values are read as plain fixed`,
		`10:47: stages[0].input.schema: schema file "schemas/ignored.avsc": logicalType "date" on long is ignored, as the Avro specification says of an invalid one (it needs int): its values are read as plain long`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseAvroOutputValidation(t *testing.T) {
	path := avroDir(t)
	tests := []struct {
		name, out string
		want      []string
	}{
		{"registry output needs a schema", `{ topic: out, format: avro, registry: { url: "http://sr" } }`,
			[]string{"11:13: stages[0].output: an avro output with a registry needs schema: path/to/file.avsc, the schema it registers and writes"}},
		{"reader schema on output", `{ topic: out, format: avro, schema: schemas/order.avsc, registry: { url: "http://sr", reader_schema: schemas/order.avsc } }`,
			[]string{"11:114: stages[0].output.registry.reader_schema: only for inputs (an output writes with schema)"}},
		{"registry output with default subject", `{ topic: out, format: avro, schema: schemas/order.avsc, registry: { url: "http://sr" } }`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := head + "stages:\n  - name: s\n    input: { topic: in }\n    output: " + tc.out + "\n    dead_letter: { topic: dlq }\n"
			_, err := Parse(path, []byte(src), nil)
			got := messages(t, err)
			for i := range got {
				got[i] = strings.TrimPrefix(got[i], path+":")
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestRegistryPasswordNeverShown(t *testing.T) {
	path := avroDir(t)
	src := head + "stages:\n  - name: s\n    input: { topic: in, format: avro, registry: { url: \"http://sr\", username: u, password: \"${P}\" } }\n    output: { topic: out }\n    dead_letter: { topic: dlq }\n"
	f, err := Parse(path, []byte(src), env(map[string]string{"P": "hunter2"}))
	if err != nil {
		t.Fatal(err)
	}
	// What a log line or a %v of the config would print.
	if s := fmt.Sprintf("%v %+v", f.Stages[0].Input, f.Stages[0].Input.Registry); strings.Contains(s, "hunter2") {
		t.Fatalf("password shown: %s", s)
	}
}

// A sink column mapped to a field that the input's Avro schema (known
// offline) does not have would be NULL in every row: validate says so,
// naming the fields there are (amout for amount, say).
func TestSinkColumnsInAvroSchema(t *testing.T) {
	path := avroDir(t)
	sink := func(input, columns string) string {
		return head + "sinks:\n  - name: pg\n    input: " + input + "\n    dead_letter: { topic: dlq }\n" +
			"    postgres: { dsn: \"postgres://u@h/db\", table: raw.events, event_id: event_id, columns: " + columns + " }\n"
	}
	for _, tc := range []struct {
		name, input, columns string
		want                 string // a message, or "" for none
	}{
		{"fields of the schema", `{ topic: in, format: avro, schema: schemas/order.avsc }`, `{ event_id: event_id, v: $value }`, ""},
		{"a typo", `{ topic: in, format: avro, schema: schemas/order.avsc }`, `{ event_id: event_id, amt: amout }`,
			`sinks[0].postgres.columns.amt: field "amout" is not in the input's Avro schema schemas/order.avsc (its fields: event_id): the column would be NULL in every row`},
		{"reader schema of a registry input", `{ topic: in, format: avro, registry: { url: "http://sr", reader_schema: schemas/order.avsc } }`, `{ event_id: event_id, amt: amout }`,
			`field "amout" is not in the input's Avro schema`},
		{"registry alone: not known offline", `{ topic: in, format: avro, registry: { url: "http://sr" } }`, `{ event_id: event_id, amt: amout }`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(path, []byte(sink(tc.input, tc.columns)), nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
}

// A stage's key names a field of its output value: with an Avro output
// whose schema file is known, a field of that schema; without transform
// steps (the output value is the input value), a field of the input's
// schema too. A typo would dead-letter every record, so validate finds
// it; a step may make the field, so the input is not checked then.
func TestStageKeyInAvroSchema(t *testing.T) {
	path := avroDir(t)
	stage := func(input, output, rest string) string {
		return head + "stages:\n  - name: s\n    input: " + input + "\n    output: " + output + "\n    dead_letter: { topic: dlq }\n" + rest
	}
	const avroIn = `{ topic: in, format: avro, schema: schemas/order.avsc }`
	for _, tc := range []struct {
		name, input, output, rest string
		want                      string // a message, or "" for none
	}{
		{"a field of the input", avroIn, `{ topic: out }`, "    key: event_id\n", ""},
		{"a typo", avroIn, `{ topic: out }`, "    key: event_idd\n",
			`stages[0].key: field "event_idd" is not in the input's Avro schema schemas/order.avsc (its fields: event_id): every record would be a dead letter for its missing key`},
		{"reader schema of a registry input", `{ topic: in, format: avro, registry: { url: "http://sr", reader_schema: schemas/order.avsc } }`, `{ topic: out }`, "    key: id\n",
			`stages[0].key: field "id" is not in the input's Avro schema`},
		{"a step may make the field", avroIn, `{ topic: out }`, "    key: id\n    transform:\n      - set: { id: 'value.event_id' }\n", ""},
		{"not in the output schema", `{ topic: in }`, `{ topic: out, format: avro, schema: schemas/order.avsc }`, "    key: id\n    transform:\n      - set: { id: '1' }\n",
			`stages[0].key: field "id" is not in the output's Avro schema schemas/order.avsc`},
		{"json in, registry alone: not known offline", `{ topic: in, format: avro, registry: { url: "http://sr" } }`, `{ topic: out }`, "    key: id\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(path, []byte(stage(tc.input, tc.output, tc.rest)), nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
}
