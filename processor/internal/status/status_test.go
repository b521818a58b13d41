package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/status"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// TestCollect checks lag against the LSO on transactional topics: the
// commit markers take offsets, and a consumer committed at the LSO has lag
// 0, not 1.
func TestCollect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := topologytest.Cluster(t, 2)

	// Three committed transactions of one record each per partition:
	// partition ends at 6 (3 records + 3 markers).
	topologytest.CommitInput(ctx, t, addr, 2, 3, 1)
	adm := topologytest.Admin(t, addr)
	lso, err := adm.ListCommittedOffsets(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	end := lso["in"][0].Offset
	// The stage's group committed partition 0 at the LSO, partition 1 at 2.
	var offs kadm.Offsets
	offs.AddOffset("in", 0, end, -1)
	offs.AddOffset("in", 1, 2, -1)
	if _, err := adm.CommitOffsets(ctx, "exactly-clean", offs); err != nil {
		t.Fatal(err)
	}

	f := load(t, addr)
	positions := func(_ context.Context, cfg pgsink.Config) ([]pgsink.StoredPosition, error) {
		if cfg.Input != "out" || cfg.PositionsTable != "" && !strings.HasPrefix(cfg.PositionsTable, "raw.") {
			t.Errorf("positions read with %+v", cfg)
		}
		return nil, errors.New("postgres is down")
	}
	rep, err := status.Collect(ctx, adm, f, status.WithPositions(positions))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stages) != 1 || len(rep.Sinks) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	st := rep.Stages[0]
	if st.Group != "exactly-clean" || len(st.Partitions) != 2 {
		t.Fatalf("stage: %+v", st)
	}
	if got := st.Partitions[0]; got.LastStable != end || got.Committed != end || got.Lag != 0 {
		t.Errorf("partition 0 committed at the LSO: %+v, want lag 0", got)
	}
	if got := st.Partitions[1]; got.Committed != 2 || got.Lag != end-2 {
		t.Errorf("partition 1: %+v, want lag %d", got, end-2)
	}
	if st.Lag != end-2 || len(st.Errors) != 0 {
		t.Errorf("stage lag %d errors %v", st.Lag, st.Errors)
	}
	sk := rep.Sinks[0]
	if sk.Group != "exactly-sink-pg" || len(sk.Errors) != 1 || !strings.Contains(sk.Errors[0], "postgres is down") {
		t.Errorf("sink: %+v", sk)
	}

	var table, js bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"STAGE clean: group exactly-clean", "SINK pg", "in/1", "error: postgres is down"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back status.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Stages[0].Lag != st.Lag {
		t.Errorf("json round trip: %v %+v", err, back)
	}

	// With the positions stored at the LSO, the sink's lag is 0.
	outEnd := int64(0)
	positions = func(context.Context, pgsink.Config) ([]pgsink.StoredPosition, error) {
		return []pgsink.StoredPosition{{Partition: 0, NextOffset: outEnd, Owner: "a", UpdatedAt: time.Now()}}, nil
	}
	rep, err = status.Collect(ctx, adm, f, status.WithPositions(positions), status.Only("pg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stages) != 0 || len(rep.Sinks) != 1 || rep.Sinks[0].Lag != 0 || rep.Sinks[0].Partitions[0].Writer != "a" {
		t.Errorf("only pg: %+v", rep)
	}
	if _, err := status.Collect(ctx, adm, f, status.Only("nope")); err == nil {
		t.Error("Only(nope): no error")
	}

	// A position stored under another topic ID (the topic deleted and
	// created again since), or with none and past the high watermark, is
	// void, as the sink itself decides: the lag is the whole partition,
	// not 0 (it was 0, with the old offset shown against the new LSO).
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "out", Partition: 0, Value: []byte("{}")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	md, err := adm.ListTopics(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	id := md["out"].ID.String()
	other := kadm.TopicID{1}.String()
	for _, tc := range []struct {
		name string
		pos  pgsink.StoredPosition
		void bool
		lag  int64
	}{
		{"same topic ID", pgsink.StoredPosition{NextOffset: 2, TopicID: id}, false, 1},
		{"another topic ID", pgsink.StoredPosition{NextOffset: 2, TopicID: other}, true, 3},
		{"another topic ID, past the end", pgsink.StoredPosition{NextOffset: 50, TopicID: other}, true, 3},
		{"no ID, within the log", pgsink.StoredPosition{NextOffset: 3}, false, 0},
		{"no ID, past the high watermark", pgsink.StoredPosition{NextOffset: 50}, true, 3},
	} {
		positions = func(context.Context, pgsink.Config) ([]pgsink.StoredPosition, error) {
			p := tc.pos
			p.Owner, p.UpdatedAt = "a", time.Now()
			return []pgsink.StoredPosition{p}, nil
		}
		rep, err := status.Collect(ctx, adm, f, status.WithPositions(positions), status.Only("pg"))
		if err != nil {
			t.Fatal(err)
		}
		got := rep.Sinks[0].Partitions[0]
		if (got.Void != "") != tc.void || got.Lag != tc.lag || (tc.void && got.Committed != -1) {
			t.Errorf("%s: %+v; want void %v, lag %d", tc.name, got, tc.void, tc.lag)
		}
		var table bytes.Buffer
		if err := rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(table.String(), "position void") != tc.void {
			t.Errorf("%s: table:\n%s", tc.name, table.String())
		}
	}
}

func load(t *testing.T, addr string) *topology.File {
	t.Helper()
	t.Setenv("PG_DSN", "postgres://u:pw@127.0.0.1:1/db")
	return topologytest.Load(t, topologytest.Stage(addr, "clean", 2, topologytest.PGSink("raw.events")))
}

// TestCollectChangelog: a stage with a dedupe step shows its changelog
// topic's offsets, the most a restore without a checkpoint reads, and the
// metrics of a restore under way; a missing changelog is an error of the
// stage.
func TestCollectChangelog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := topologytest.Cluster(t, 2)
	f := topologytest.Load(t, topologytest.Stage(addr, "clean", 2, `    key: event_id
    transform:
      - dedupe: { id: value.event_id, retention: 1h }
`))
	adm := topologytest.Admin(t, addr)
	rep, err := status.Collect(ctx, adm, f)
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Stages[0].Changelog; c == nil || c.Topic != "exactly-clean-dedupe-changelog" || !strings.Contains(strings.Join(rep.Stages[0].Errors, "\n"), "changelog exactly-clean-dedupe-changelog: ") {
		t.Fatalf("missing changelog: %+v, errors %v; want the topic named and an error", c, rep.Stages[0].Errors)
	}

	const changelog = "exactly-clean-dedupe-changelog"
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, changelog); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 5 {
		r := &kgo.Record{Topic: changelog, Partition: int32(i % 2), Key: []byte{byte('a' + i)}, Value: []byte("1")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = status.Collect(ctx, topologytest.Admin(t, addr), f) // a client that never saw the topic missing
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Stages[0].Changelog
	if c == nil || c.Offsets != 5 || len(c.Partitions) != 2 || c.Partitions[0].End != 3 || c.Partitions[1].End != 2 || c.Progress != status.RestoreMetrics {
		t.Fatalf("changelog: %+v (errors %v), want 5 offsets (3 + 2)", c, rep.Stages[0].Errors)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"changelog exactly-clean-dedupe-changelog: 5 offsets", "exactly_stage_state_restored_records_total", changelog + "/1"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}
