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

	"github.com/exactly-io/exactly/cmd/exactly/status"
	"github.com/exactly-io/exactly/processor/pgsink"
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
}

func load(t *testing.T, addr string) *topology.File {
	t.Helper()
	t.Setenv("PG_DSN", "postgres://u:pw@127.0.0.1:1/db")
	return topologytest.Load(t, topologytest.Stage(addr, "clean", 2, topologytest.PGSink("raw.events")))
}
