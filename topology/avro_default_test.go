package topology

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// validate reads Avro field defaults as the specification does: a fixed
// default's code points 0-255 are its bytes, so "\u00ff\u00fe" fits a
// fixed of 2 and not one of 4, and a code point above 255 is refused,
// naming the field, in an output schema and a reader schema alike.
func TestParseAvroFieldDefaults(t *testing.T) {
	path := avroDir(t)
	dir := filepath.Dir(path)
	fixed := func(size, def string) string {
		return `{"type":"record","name":"R","fields":[{"name":"id","type":"string"},` +
			`{"name":"tag","type":{"type":"fixed","name":"Tag","size":` + size + `},"default":"` + def + `"}]}`
	}
	for name, text := range map[string]string{
		"fixed2.avsc":   fixed("2", `\u00ff\u00fe`),
		"fixed4.avsc":   fixed("4", `\u00ff\u00fe`),
		"above255.avsc": fixed("2", `\u00ff\u0100`),
	} {
		if err := os.WriteFile(filepath.Join(dir, "schemas", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, file string
		want       []string
	}{
		{"a fixed of 2 takes two code points", "fixed2.avsc", nil},
		{"a fixed of 4 does not", "fixed4.avsc", []string{
			`13:52: stages[0].input.registry.reader_schema: schema file "schemas/fixed4.avsc" is not a valid Avro schema: record "R" field "tag": invalid default: 2 bytes for Tag of size 4`,
			`14:49: stages[0].output.schema: schema file "schemas/fixed4.avsc" is not a valid Avro schema: record "R" field "tag": invalid default: 2 bytes for Tag of size 4`,
		}},
		{"a code point above 255", "above255.avsc", []string{
			`13:52: stages[0].input.registry.reader_schema: schema file "schemas/above255.avsc" is not a valid Avro schema: record "R" field "tag": invalid default: code point U+0100 at index 1 is above 255: a fixed default is a string of code points 0-255, one per byte`,
			`14:49: stages[0].output.schema: schema file "schemas/above255.avsc" is not a valid Avro schema: record "R" field "tag": invalid default: code point U+0100 at index 1 is above 255: a fixed default is a string of code points 0-255, one per byte`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := head + "stages:\n  - name: s\n    input:\n      topic: in\n      format: avro\n      registry: { url: \"http://sr\", reader_schema: schemas/" + tc.file + " }\n" +
				"    output: { topic: out, format: avro, schema: schemas/" + tc.file + " }\n    dead_letter: { topic: dlq }\n"
			_, err := Parse(path, []byte(src), env(nil))
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
