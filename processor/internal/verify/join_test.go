package verify

import (
	"testing"

	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// A join that drops a record whose key the table lacks (missing: drop,
// the default) writes nothing for it: verify counts such a record as
// filtered, not lost. With missing: "null" or dead_letter every record
// has an output or a dead letter, so none may go missing.
func TestJoinDropsAreFiltered(t *testing.T) {
	for _, tt := range []struct {
		missing string
		filters bool
	}{{"", true}, {"missing: drop, ", true}, {`missing: "null", `, false}, {"missing: dead_letter, ", false}} {
		src := topologytest.Stage("127.0.0.1:1", "s", 1, "    transform:\n      - join: { table: customers, key: key, as: c, "+tt.missing+"history_retention: 1d }\n")
		f, err := topology.Parse("t.yaml", []byte(src), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := newStageCheck(f, &f.Stages[0])
		if err != nil {
			t.Fatal(err)
		}
		if c.mayFilter != tt.filters {
			t.Errorf("join {%s}: may filter %v, want %v", tt.missing, c.mayFilter, tt.filters)
		}
		accountOne := &StageCheck{mayFilter: c.mayFilter}
		if err := accountOne.accountOutcome(group{}, "in/0@0"); err != nil {
			t.Fatal(err)
		}
		if lost := accountOne.Lost; (lost == 0) != tt.filters {
			t.Errorf("join {%s}: a record without output or dead letter counted lost %d times", tt.missing, lost)
		}
	}
}
