package transform

import "testing"

// TestRenameNeverOverwrites: a rename onto a field that holds a value is
// an error (the record becomes a dead letter), never a silent overwrite;
// the renames of one step move together.
func TestRenameNeverOverwrites(t *testing.T) {
	runValueCases(t, []valueCase{
		{name: "onto an existing field", steps: "      - rename: { n: old_n }\n", in: `{"id":"r4","n":1.5,"old_n":"keep me"}`,
			wantErr: `field "old_n": cannot rename n to old_n: old_n already holds a value`},
		{name: "onto a null field", steps: "      - rename: { n: m }\n", in: `{"n":1,"m":null}`,
			wantErr: `field "m": cannot rename n to m`},
		{name: "onto a nested field", steps: "      - rename: { n: o.x }\n", in: `{"n":1,"o":{"x":2}}`,
			wantErr: `field "o.x": cannot rename n to o.x`},
		{name: "two fields onto one", steps: "      - rename: { a: x, b: x }\n", in: `{"a":1,"b":2}`,
			wantErr: `field "x": cannot rename`},
		{name: "a swap", steps: "      - rename: { a: b, b: a }\n", in: `{"a":1,"b":"two"}`, want: `{"a":"two","b":1}`},
		{name: "into a new nested object", steps: "      - rename: { n: o.y }\n", in: `{"n":1.50,"o":{"x":2}}`, want: `{"o":{"x":2,"y":1.50}}`},
		{name: "a missing source is skipped", steps: "      - rename: { q: n }\n", in: `{"n":1}`, want: `{"n":1}`},
		{name: "onto itself", steps: "      - rename: { n: n }\n", in: `{"n":1,"m":2}`, want: `{"n":1,"m":2}`},
		{name: "onto a field a later step frees", steps: "      - drop: [m]\n      - rename: { n: m }\n", in: `{"n":1,"m":2}`, want: `{"m":1}`},
	})
}
