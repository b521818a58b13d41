package serde

import (
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// FuzzAvroDecode: no input makes the raw Avro decoder panic, and whatever
// decodes encodes back.
func FuzzAvroDecode(f *testing.F) {
	c := mustCodec(f, Config{Format: Avro, Schema: typesSchema})
	m := mustCodec(f, Config{Format: Avro, Schema: moneySchema})
	f.Add([]byte{})
	f.Add([]byte{0x7e})
	f.Add(rawAvro(f, moneySchema, jsonValue(f, `{"amount":"12.34","rate":"0.000123","big":"9223372036854775808"}`)))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []Codec{c, m} {
			v, err := c.Decode(b)
			if err != nil {
				continue
			}
			if _, err := c.Encode(v); err != nil {
				t.Fatalf("decoded %x but cannot encode it back: %v", b, err)
			}
		}
	})
}

// FuzzAvroRegistryDecode: framed input, through a registry, never panics
// and is never transient (the registry is up).
func FuzzAvroRegistryDecode(f *testing.F) {
	reg := srfake.New()
	f.Cleanup(reg.Close)
	id, _, err := reg.RegisterSchema("t-value", sr.Schema{Schema: v1Schema, Type: sr.TypeAvro})
	if err != nil {
		f.Fatal(err)
	}
	c := mustCodec(f, Config{Format: Avro, Registry: Registry{URL: reg.URL(), ReaderSchema: v2Schema}})
	f.Add(frame(id, rawAvro(f, v1Schema, map[string]any{"event_id": "x"})))
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{1, 2, 3, 4, 5, 6})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 5 && b[0] == 0 {
			b[1], b[2], b[3] = 0, 0, 0 // keep IDs small: unknown IDs cost a request each
			b[4] %= 4
		}
		if _, err := c.Decode(b); IsTransient(err) {
			t.Fatalf("transient error from an up registry: %v", err)
		}
	})
}

// FuzzJSONDecode: the JSON decoder never panics, and what it decodes
// encodes to Avro or fails cleanly.
func FuzzJSONDecode(f *testing.F) {
	a := mustCodec(f, Config{Format: Avro, Schema: typesSchema})
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"amount":"12.34"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := jsonCodec{}.Decode(b)
		if err != nil {
			return
		}
		_, _ = a.Encode(v)
		_, _ = stringCodec{}.Decode(b)
		_, _ = bytesCodec{}.Decode(b)
	})
}
