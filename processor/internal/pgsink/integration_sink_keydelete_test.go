//go:build integration

package pgsink_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// TestSinkKeyColumnDeletes inserts two rows whose event ID is the record
// key ($key) and deletes the first, by a tombstone and by a change
// event's "d", into a key column of each type: bytea (with a key framed
// as an Avro key is, starting with 0x00, which no text holds), text,
// bigint and uuid. The delete matches the stored key; nothing is a dead
// letter.
func TestSinkKeyColumnDeletes(t *testing.T) {
	for _, tc := range []struct {
		col        string
		gone, kept string
		want       string // the kept row's key, as psql shows it
	}{
		{"bytea", "\x00\x00\x00\x00\x07\x02\x06", "\x00\x00\x00\x00\x07\x04\x08", `\x00000000070408`},
		{"text", `{"tenant":3,"id":3}`, `{"tenant":3,"id":4}`, `{"tenant":3,"id":4}`},
		{"bigint", "3", "4", "4"},
		{"uuid", "0b7e7dee-87ac-4f52-b0a9-3b2b3e4c1d5a", "1c8f8eef-98bd-4063-b1ba-4c3c4f5d2e6b", "1c8f8eef-98bd-4063-b1ba-4c3c4f5d2e6b"},
	} {
		for _, envelope := range []string{topology.EnvelopeNone, topology.EnvelopeDebezium} {
			t.Run(tc.col+"/"+envelope, func(t *testing.T) {
				topic := newTopic(t, "keydel_in")
				recs := []*kgo.Record{
					{Key: []byte(tc.gone), Value: []byte(`{"v":"a"}`)},
					{Key: []byte(tc.kept), Value: []byte(`{"v":"b"}`)},
					{Key: []byte(tc.gone)},
				}
				tombstones := topology.TombstonesDelete
				if envelope == topology.EnvelopeDebezium {
					tombstones = topology.TombstonesSkip
					recs = []*kgo.Record{
						{Key: []byte(tc.gone), Value: []byte(`{"op":"c","after":{"v":"a"}}`)},
						{Key: []byte(tc.kept), Value: []byte(`{"op":"c","after":{"v":"b"}}`)},
						{Key: []byte(tc.gone), Value: []byte(`{"op":"d","before":{"v":"a"}}`)},
						{Key: []byte(tc.gone)},
					}
				}
				for _, r := range recs {
					r.Topic = topic
				}
				if err := kafkaClient(t).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				var table string
				schema, s := itemSink(t, topic, int64(len(recs)), envelope, tombstones,
					func(st pgsink.Stats) bool { return st.Deleted >= 1 }, func(c *pgsink.Config) {
						table = c.Table + "_" + tc.col
						if _, err := pgPool(t).Exec(context.Background(), "CREATE TABLE "+table+" (k "+tc.col+" PRIMARY KEY, v text)"); err != nil {
							t.Fatal(err)
						}
						c.Table, c.EventID = table, "k"
						c.Columns = []pgsink.Column{{Name: "k", Source: topology.SourceKey}, {Name: "v", Source: "v"}}
					})
				if got := psqlLines(t, "SELECT k::text || '|' || v FROM "+table); len(got) != 1 || got[0] != tc.want+"|b" {
					t.Fatalf("rows %q; want %s|b", got, tc.want)
				}
				if dead := psqlLines(t, "SELECT count(*) FROM "+schema+".dead"); dead[0] != "0" {
					t.Fatalf("%s dead letters; want none", dead[0])
				}
				if st := s.Stats(); st.Deleted != 1 {
					t.Fatalf("stats %+v: want 1 deleted", st)
				}
			})
		}
	}
}
