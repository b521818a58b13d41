//go:build integration

package pgsink_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// TestSinkConnectNullPayload loads the deletes Kafka Connect's JSON
// converter writes with schemas.enable after ExtractNewRecordState,
// {"schema": ..., "payload": null}, as tombstones: deleted under
// tombstones delete (by a key with or without its schema wrapper),
// skipped under tombstones skip; never a dead letter.
func TestSinkConnectNullPayload(t *testing.T) {
	const valueSchema = `{"type":"struct","optional":true,"fields":[{"type":"int64","optional":false,"field":"id"},{"type":"string","optional":true,"field":"big"}]}`
	row := func(id int) []byte {
		return fmt.Appendf(nil, `{"id":%d}|{"schema":%s,"payload":{"id":%d,"big":"b%d"}}`, id, valueSchema, id, id)
	}
	null := `{"schema":` + valueSchema + `,"payload":null}`
	lines := [][]byte{
		row(1), row(2), row(3),
		[]byte(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false},"payload":{"id":1}}|` + null),
		[]byte(`{"id":2}|` + null),
	}
	for _, tc := range []struct {
		tombstones string
		want       string
		deleted    int64
	}{
		{topology.TombstonesDelete, "3", 2},
		{topology.TombstonesSkip, "1,2,3", 0},
	} {
		t.Run(tc.tombstones, func(t *testing.T) {
			topic := newTopic(t, "connull_in")
			kcatProduce(t, topic, lines)
			schema, s := itemSink(t, topic, int64(len(lines)), topology.EnvelopeNone, tc.tombstones,
				func(st pgsink.Stats) bool { return st.Deleted >= tc.deleted })
			if got := psqlLines(t, "SELECT id FROM "+schema+".items ORDER BY id"); strings.Join(got, ",") != tc.want {
				t.Fatalf("rows left %v; want %s", got, tc.want)
			}
			if dead := psqlLines(t, "SELECT count(*) FROM "+schema+".dead"); dead[0] != "0" {
				t.Fatalf("%s dead letters; want none", dead[0])
			}
			if st := s.Stats(); st.Deleted != tc.deleted {
				t.Fatalf("stats %+v: want %d deleted", st, tc.deleted)
			}
		})
	}
}
