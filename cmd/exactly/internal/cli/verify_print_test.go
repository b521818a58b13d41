package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor"
)

// An OK verdict names the sinks whose rows verify did not compare
// (tombstones: delete, a debezium envelope), so that it is not read as a
// claim about their tables.
func TestPrintReportNamesUncomparedSinks(t *testing.T) {
	for _, tc := range []struct {
		sinks string // the report's sinks, as JSON
		want  string
	}{
		{`[{"name":"a","rows_checked":true}]`, "OK: exactly once (no loss, no duplicate, no open transaction)\n"},
		{`[{"name":"a","rows_checked":true},{"name":"del","note":"rows not compared: tombstones: delete makes the rows depend on order"}]`,
			"OK: exactly once (no loss, no duplicate, no open transaction); rows of del not compared (see above)\n"},
	} {
		rep := processor.VerifyReport{OK: true}
		if err := json.Unmarshal([]byte(tc.sinks), &rep.Sinks); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		printReport(&b, &rep, 0)
		if !strings.HasSuffix(b.String(), tc.want) {
			t.Errorf("report ends\n%q\nwant\n%q", b.String()[max(0, b.Len()-120):], tc.want)
		}
	}
}

// Window results are named as what they are, not as outputs without
// lineage that were not accounted for.
func TestPrintReportExplainsWindowResults(t *testing.T) {
	var rep processor.VerifyReport
	if err := json.Unmarshal([]byte(`{"ok":true,"stages":[{"name":"per-minute","in":3,"aggregated":3,"window_results":1}]}`), &rep); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printReport(&b, &rep, 0)
	if want := "stage per-minute: 1 output is a window result of its aggregate step"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
	if strings.Contains(b.String(), "not accounted for") {
		t.Errorf("report calls a window result unaccounted:\n%s", b.String())
	}
}
