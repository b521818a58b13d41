package topology

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v4"
)

var update = flag.Bool("update", false, "rewrite the generated field reference and JSON Schema in cmd/exactly/docs")

// docsDir holds the generated pages that the CLI embeds.
const docsDir = "../cmd/exactly/docs"

// TestGeneratedDocsCurrent: the field reference and the JSON Schema in
// cmd/exactly/docs are what the spec generates. Regenerate them with
// go test ./topology -update.
func TestGeneratedDocsCurrent(t *testing.T) {
	for name, want := range map[string][]byte{"topology.md": reference(), "schema.json": Schema()} {
		path := filepath.Join(docsDir, name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (generate it with go test ./topology -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date with the spec: regenerate it with go test ./topology -update", path)
		}
	}
}

// TestReferenceListsEverySetting: every setting has its row.
func TestReferenceListsEverySetting(t *testing.T) {
	ref := string(reference())
	for _, n := range settings() {
		if !strings.Contains(ref, "| `"+n.path+"` |") {
			t.Errorf("reference has no row for %s", n.path)
		}
	}
	for _, want := range []string{
		"| `stages[].commit.interval` | duration | 100ms | > 0 |",
		"| `sinks[].commit.interval` | duration | 200ms | > 0 |",
		"| `stages[].fetch_max_bytes` | integer | 2097152 (2 MiB) | 1024 (1 KiB) to 104857600 (100 MiB) bytes |",
		"| `sinks[].postgres.mode` | string | `insert` | `insert`, `upsert` |",
	} {
		if !strings.Contains(ref, want) {
			t.Errorf("reference lacks %q", want)
		}
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// asJSON reads YAML as the JSON value an editor's schema check sees.
func asJSON(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSchemaAcceptsExamples: every example topology, and the files the
// tests parse, are valid against the schema.
func TestSchemaAcceptsExamples(t *testing.T) {
	s := compileSchema(t)
	files, err := filepath.Glob("../deploy/examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../deploy/examples/recipes/*.yaml")
	files = append(files, more...)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".test.yaml") {
			continue // a fixture of exactly test, not a topology
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if err := s.Validate(asJSON(t, data)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if n < 2 {
		t.Fatalf("only %d example topologies", n)
	}
	if err := s.Validate(asJSON(t, []byte(example))); err != nil {
		t.Errorf("the package's example: %v", err)
	}
}

// TestSchemaRejects: the schema catches what an editor should underline.
func TestSchemaRejects(t *testing.T) {
	s := compileSchema(t)
	for _, src := range []string{
		"version: 1\nkafka: { brokers: [a:1] }\ntopics: [{ name: a, partitions: 0 }]\n",
		"version: 1\nkafka: { brokers: [a:1], colour: red }\n",
		"version: 2\nkafka: { brokers: [a:1] }\n",
		"version: 1\nkafka: { brokers: [a:1] }\nstages: [{ name: s, input: { topic: a, format: xml } }]\n",
		"version: 1\nkafka: { brokers: [a:1], transaction_timeout: soon }\n",
	} {
		if err := s.Validate(asJSON(t, []byte(src))); err == nil {
			t.Errorf("schema accepts:\n%s", src)
		}
	}
	ok := "version: 1\nkafka: { brokers: [a:1] }\ntopics: [{ name: a, partitions: \"${P:-3}\" }]\n"
	if err := s.Validate(asJSON(t, []byte(ok))); err != nil {
		t.Errorf("schema rejects an environment reference: %v", err)
	}
}
