package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor"
)

// The records resets skipped are printed range by range, as skipped on
// purpose, apart from the lost.
func TestPrintReportNamesResetSkips(t *testing.T) {
	var rep processor.VerifyReport
	err := json.Unmarshal([]byte(`{"ok":true,"stages":[{"name":"clean","input":"orders.raw","in":500,"processed":300,"reset_skipped":200,
		"reset_skips":[{"partition":0,"from":108,"to":169,"at":"2026-12-06T15:20:30Z","target":"latest","records":61},
		{"partition":1,"from":87,"to":226,"at":"2026-12-06T15:20:30Z","target":"latest","records":139}]}]}`), &rep)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printReport(&b, &rep, 0)
	want := `stage clean: 200 records skipped on purpose by exactly reset (not lost):
  orders.raw/0 [108, 169): 61 records, reset to latest at 2026-12-06T15:20:30Z
  orders.raw/1 [87, 226): 139 records, reset to latest at 2026-12-06T15:20:30Z
`
	if !strings.Contains(b.String(), want) {
		t.Errorf("report lacks\n%s\ngot\n%s", want, b.String())
	}
}
