package pgsink

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
)

// benchValue is a 1 KiB JSON record like the bench's input: flat, or with
// a nested object and array (nested) whose keys the jsonb column checks.
func benchValue(i int, nested bool) []byte {
	v := fmt.Appendf(nil, `{"event_id":"e-%09d","amount":%d,"customer_id":"c-%d","region":"eu","internal":"n-%d",`, i, i%1000, i%977, i)
	if nested {
		v = append(v, `"address":{"street":"Main St 1","city":"Springfield","geo":{"lat":1.5,"lon":2.5}},"items":[{"sku":"a","n":1},{"sku":"b","n":2}],`...)
	}
	v = append(v, `"pad":"`...)
	for len(v) < 1024-2 {
		v = append(v, 'x')
	}
	return append(v, `"}`...)
}

// BenchmarkPrepareRow is the sink's Go work per record of an event_id
// text, body jsonb ($value) table: decode, checks, and the COPY text.
func BenchmarkPrepareRow(b *testing.B) {
	for _, nested := range []bool{false, true} {
		b.Run(fmt.Sprintf("nested=%v", nested), func(b *testing.B) {
			cfg := testConfig()
			cfg.Columns = []Column{{"event_id", "event_id"}, {"body", topology.SourceValue}}
			cfg.Mode = topology.ModeUpsert
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			s.types = []colType{plainType("text"), plainType("jsonb")}
			recs := make([]*kgo.Record, 1000)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "e-%09d", i), Value: benchValue(i, nested), Offset: int64(i)}
			}
			b.SetBytes(int64(len(recs[0].Value)))
			b.ReportAllocs()
			var buf []byte
			for i := 0; b.Loop(); i++ {
				o, ok, err := s.toOp(recs[i%len(recs)])
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				if buf, err = appendCopyRow(buf[:0], o.row); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
