package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor"
)

// An OK verdict names the sinks whose rows verify did not compare
// (tombstones: delete, a debezium envelope), so that it is not read as a
// claim about their tables.
func TestPrintReportNamesUncomparedSinks(t *testing.T) {
	for _, tc := range []struct {
		sinks []*processor.SinkCheck
		want  string
	}{
		{[]*processor.SinkCheck{{Name: "a", RowsChecked: true}}, "OK: exactly once (no loss, no duplicate, no open transaction)\n"},
		{[]*processor.SinkCheck{{Name: "a", RowsChecked: true}, {Name: "del", Note: "rows not compared: tombstones: delete makes the rows depend on order"}},
			"OK: exactly once (no loss, no duplicate, no open transaction); rows of del not compared (see above)\n"},
	} {
		var b bytes.Buffer
		printReport(&b, &processor.VerifyReport{OK: true, Sinks: tc.sinks}, 0)
		if !strings.HasSuffix(b.String(), tc.want) {
			t.Errorf("report ends\n%q\nwant\n%q", b.String()[max(0, b.Len()-120):], tc.want)
		}
	}
}
