package transform

import (
	"math"
	"strings"
	"testing"
)

// TestExactComparisons holds comparisons of an int or uint with a double
// to the real number line, where cel-go's own would round the integer to
// a double first (2^53 + 1 would equal 2^53).
func TestExactComparisons(t *testing.T) {
	const big = `{"n":9007199254740993,"m":9223372036854775807,"d":9007199254740992.0,"h":0.5,"s":"x","l":[9007199254740992.0,1.5],"o":{"a":9007199254740993},"arr":[9007199254740993]}`
	tests := []struct{ expr, want string }{
		{`value.n == 9007199254740992.0`, "false"},
		{`value.n != 9007199254740992.0`, "true"},
		{`value.n > 9007199254740992.0`, "true"},
		{`value.n >= 9007199254740992.0`, "true"},
		{`value.n < 9007199254740992.0`, "false"},
		{`value.n <= 9007199254740992.0`, "false"},
		{`9007199254740992.0 < value.n`, "true"},
		{`value.d == value.n`, "false"},
		{`value.d < value.n`, "true"},
		{`value.n == value.d`, "false"},
		{`value.m < 9223372036854775808.0`, "true"},
		{`value.m == 9223372036854775808.0`, "false"},
		{`dyn(9223372036854775807) < 9223372036854775808.0`, "true"},
		{`value.m > -9223372036854775809.0`, "true"},
		{`dyn(18446744073709551615u) < 18446744073709551616.0`, "true"},
		{`dyn(18446744073709551615u) == 18446744073709551616.0`, "false"},
		{`value.n in value.l`, "false"},
		{`9007199254740992 in value.l`, "true"},
		// At any depth of == and !=, compared exactly, not as doubles.
		{`[value.n] == [9007199254740992.0]`, "false"},
		{`[value.n] != [9007199254740992.0]`, "true"},
		{`{"a": value.n} == {"a": 9007199254740992.0}`, "false"},
		{`value.o == {"a": 9007199254740992.0}`, "false"},
		{`value.o != {"a": 9007199254740992.0}`, "true"},
		{`[9007199254740992.0] in [value.arr]`, "false"},
		{`[[value.n]] == [[9007199254740993]]`, "true"},
		{`value.o == {"a": 9007199254740993}`, "true"},
		{`value.o == {"a": 9007199254740993, "b": 1}`, "false"},
		// The literal 9007199254740993.0 is the double 2^53 already.
		{`value.arr == [9007199254740993.0]`, "false"},
		{`value.n in [9007199254740993, 1.5]`, "true"},
		{`value.n in [9007199254740992.0, "x"]`, "false"},
		{`"x" in ["x", "y"]`, "true"},
		{`value.l == [9007199254740992, 1.5]`, "true"},
		// What cel-go already did right stays as it was.
		{`value.d == 9007199254740992`, "true"},
		{`value.h > 0`, "true"},
		{`value.h < 1`, "true"},
		{`dyn(2) == 2.0`, "true"},
		{`dyn(3) > 2.5`, "true"},
		{`dyn(-0.0) == 0`, "true"},
		{`value.n == value.n`, "true"},
		{`value.s < "y"`, "true"},
		{`value.s == 1`, "false"},
		{`value.s != 1`, "true"},
		{`1.5 in value.l`, "true"},
		{`"x" in ["x"]`, "true"},
		// The extension functions that compare inside (math.least and
		// math.greatest, distinct, sets.*): these were the int, true,
		// true, true and [9007199254740993].
		{`math.least(value.n, value.d)`, "9007199254740992.0"},
		{`math.greatest(value.d, value.n)`, "9007199254740993"},
		{`math.least([value.n, value.d, 1.5])`, "1.5"},
		{`math.greatest([value.d, value.n, 1.5])`, "9007199254740993"},
		{`sets.contains([value.n], [value.d])`, "false"},
		{`sets.contains([value.d, value.n], [9007199254740993])`, "true"},
		{`sets.equivalent([value.n], [value.d])`, "false"},
		{`sets.equivalent([value.n, value.d], [value.d, value.n])`, "true"},
		{`sets.intersects([value.n], [value.d])`, "false"},
		{`sets.intersects([value.n, 2.0], [2])`, "true"},
		{`[value.n, value.d].distinct()`, "[9007199254740993,9007199254740992.0]"},
		{`[value.n, value.n, 1, 1.0].distinct()`, "[9007199254740993,1]"},
		{`[[value.n], [value.d]].distinct()`, "[[9007199254740993],[9007199254740992.0]]"},
		// ... and as cel-go computes them otherwise.
		{`math.least(1, 2.5)`, "1"},
		{`math.greatest(value.h, 0)`, "0.5"},
		{`sets.contains([dyn(1)], [dyn(1.0)])`, "true"},
		{`[1, 1.0, 2].distinct()`, "[1,2]"},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := apply(t, "      - set: { r: '"+tc.expr+"' }\n", big)
			if err != nil {
				t.Fatal(err)
			}
			if want := `,"r":` + tc.want + `}`; !strings.HasSuffix(got[0], want) {
				t.Fatalf("got %s, want it to end %s", got[0], want)
			}
		})
	}
	t.Run("a filter keeps the record it should", func(t *testing.T) {
		got, err := apply(t, "      - filter: 'value.n != 9007199254740992.0'\n", `{"n":9007199254740993}`)
		if err != nil || len(got) != 1 {
			t.Fatalf("got %q, %v; want the record kept", got, err)
		}
	})
	t.Run("errors are cel-go's", func(t *testing.T) {
		for expr, want := range map[string]string{
			`value.s < 1`:            "no such overload",
			`value.l < value.l`:      "no such overload",
			`value.missing < 1.0`:    "no such key",
			`1.0 < value.missing`:    "no such key",
			`value.n in value.s`:     "no such overload",
			`value.missing in [1.0]`: "no such key",
		} {
			if _, err := apply(t, "      - set: { r: '"+expr+"' }\n", big); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want one containing %q", expr, err, want)
			}
		}
	})
}

func TestCompareIntDouble(t *testing.T) {
	tests := []struct {
		i    int64
		d    float64
		want int
	}{
		{0, 0, 0}, {0, math.Copysign(0, -1), 0}, {1, 0.5, 1}, {-1, -0.5, -1}, {-1, -1.5, 1},
		{1 << 53, 1 << 53, 0}, {1<<53 + 1, 1 << 53, 1}, {1<<53 - 1, 1 << 53, -1},
		{math.MaxInt64, 1 << 63, -1}, {math.MinInt64, -(1 << 63), 0}, {math.MinInt64, -(1 << 63) - 4096, 1},
		{0, math.Inf(1), -1}, {0, math.Inf(-1), 1}, {math.MaxInt64, math.MaxFloat64, -1},
	}
	for _, tc := range tests {
		if got := compareIntDouble(tc.i, tc.d); got != tc.want {
			t.Errorf("compareIntDouble(%d, %v) = %d, want %d", tc.i, tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		u    uint64
		d    float64
		want int
	}{{0, -0.5, 1}, {0, math.Copysign(0, -1), 0}, {math.MaxUint64, 1 << 64, -1}, {1<<53 + 1, 1 << 53, 1}, {3, 2.5, 1}, {2, 2.5, -1}} {
		if got := compareUintDouble(tc.u, tc.d); got != tc.want {
			t.Errorf("compareUintDouble(%d, %v) = %d, want %d", tc.u, tc.d, got, tc.want)
		}
	}
}
