package serde

import (
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const benchSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"event_id","type":"string"},
 {"name":"customer","type":"string"},
 {"name":"qty","type":"long"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"tags","type":{"type":"array","items":"string"}}
]}`

const benchJSON = `{"event_id":"e-000123","customer":"c-42","qty":3,"amount":"12.34","at":"2024-02-29T12:34:56.789Z","note":null,"tags":["a","b"]}`

// benchCodecs returns each format's codec and one encoded record for it.
func benchCodecs(b *testing.B) map[string]struct {
	c   Codec
	rec []byte
} {
	reg := srfake.New()
	b.Cleanup(reg.Close)
	register(b, reg, "orders-value", sr.Schema{Schema: benchSchema, Type: sr.TypeAvro})
	v := jsonValue(b, benchJSON)
	out := map[string]struct {
		c   Codec
		rec []byte
	}{}
	for name, cfg := range map[string]Config{
		"json":          {Format: JSON},
		"string":        {Format: String},
		"bytes":         {Format: Bytes},
		"avro_file":     {Format: Avro, Schema: benchSchema},
		"avro_registry": {Format: Avro, Schema: benchSchema, Topic: "orders", Registry: Registry{URL: reg.URL()}},
	} {
		c := mustCodec(b, cfg)
		rec, err := c.Encode(v)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Decode(rec); err != nil { // warms the registry cache
			b.Fatal(err)
		}
		out[name] = struct {
			c   Codec
			rec []byte
		}{c, rec}
	}
	return out
}

var benchOrder = []string{"json", "string", "bytes", "avro_file", "avro_registry"}

func BenchmarkDecode(b *testing.B) {
	cs := benchCodecs(b)
	for _, name := range benchOrder {
		c := cs[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.rec)))
			for b.Loop() {
				if _, err := c.c.Decode(c.rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	cs := benchCodecs(b)
	for _, name := range benchOrder {
		c := cs[name]
		// Encode what the format decodes to, as a stage does.
		v, err := c.c.Decode(c.rec)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.c.Encode(v); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
