package state

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/exactly-io/exactly/serde"
)

// Exact numbers of aggregations. An integer (a CEL int, or a uint up to
// the int64 maximum) stays an int64, and a sum of integers only is an
// exact int64 (ErrOverflow beyond). A double enters as its shortest
// decimal text (strconv 'g', -1): the text it was written with in the
// input whenever that text holds at most 17 significant digits. From the
// first double on, a sum is exact decimal arithmetic (math/big.Rat over
// such decimals), so it never rounds, and it is written with every digit
// it has and a decimal point (a double by the text rule).

// num is an exact number: an int64, or a decimal.
type num struct {
	dec bool
	i   int64
	r   *big.Rat // when dec: a finite decimal
}

// toNum converts a native value of an aggregation's expression. ok is
// false for null, which aggregations skip.
func toNum(v any) (n num, ok bool, err error) {
	switch v := v.(type) {
	case nil:
		return num{}, false, nil
	case int64:
		return num{i: v}, true, nil
	case uint64:
		if v > 1<<63-1 {
			return num{}, false, fmt.Errorf("%du: %w", v, ErrOverflow)
		}
		return num{i: int64(v)}, true, nil
	case float64:
		r, ok := new(big.Rat).SetString(strconv.FormatFloat(v, 'g', -1, 64))
		if !ok {
			return num{}, false, fmt.Errorf("double %v: %w", v, ErrNotNumber)
		}
		return num{dec: true, r: r}, true, nil
	case json.Number:
		return parseNum(string(v))
	}
	return num{}, false, fmt.Errorf("got %T: %w", v, ErrNotNumber)
}

// valueText is the JSON text of v, a native value that toNum read as n:
// a double as the JSON writer writes it (-0.0 stays -0.0, 1e21 is
// 1e+21), number text as it is, an integer in decimal. parseNum reads it
// back as n.
func valueText(v any, n num) string {
	switch v := v.(type) {
	case float64:
		if b, err := serde.AppendJSON(nil, v, ""); err == nil {
			return string(b)
		}
	case json.Number:
		return string(v)
	}
	return n.text()
}

// parseNum reads number text by the text rule (a '.', 'e' or 'E' makes a
// decimal).
func parseNum(s string) (num, bool, error) {
	if strings.ContainsAny(s, ".eE") {
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			return num{}, false, fmt.Errorf("%q: %w", s, ErrNotNumber)
		}
		return num{dec: true, r: r}, true, nil
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return num{}, false, fmt.Errorf("%q: %w", s, ErrOverflow)
	}
	return num{i: i}, true, nil
}

func (n num) rat() *big.Rat {
	if n.dec {
		return n.r
	}
	return new(big.Rat).SetInt64(n.i)
}

// add returns a+b: int64 while both are integers (ErrOverflow beyond),
// exact decimal otherwise.
func add(a, b num) (num, error) {
	if !a.dec && !b.dec {
		s := a.i + b.i
		if (s > a.i) != (b.i > 0) {
			return num{}, ErrOverflow
		}
		return num{i: s}, nil
	}
	return num{dec: true, r: new(big.Rat).Add(a.rat(), b.rat())}, nil
}

// addExact returns a+b as add does, but past the int64 range it goes on
// as an exact decimal instead of failing.
func addExact(a, b num) num {
	if s, err := add(a, b); err == nil {
		return s
	}
	return num{dec: true, r: new(big.Rat).Add(a.rat(), b.rat())}
}

// cmp compares a and b exactly.
func cmp(a, b num) int {
	if !a.dec && !b.dec {
		switch {
		case a.i < b.i:
			return -1
		case a.i > b.i:
			return 1
		}
		return 0
	}
	return a.rat().Cmp(b.rat())
}

// text writes n as JSON number text: an integer's digits, or a decimal's
// exact digits with a point.
func (n num) text() string {
	if !n.dec {
		return strconv.FormatInt(n.i, 10)
	}
	s, _ := decimalText(n.r, 0)
	return s
}

// decimalText writes r with every digit it has and a decimal point, when
// its expansion is finite (exact is true); otherwise rounded half away
// from zero to places digits after the point.
func decimalText(r *big.Rat, places int) (s string, exact bool) {
	d := new(big.Int).Set(r.Denom())
	twos, fives := 0, 0
	two, five, m := big.NewInt(2), big.NewInt(5), new(big.Int)
	for d.Cmp(big.NewInt(1)) > 0 {
		if q, rem := new(big.Int).QuoRem(d, two, m); rem.Sign() == 0 {
			d, twos = q, twos+1
			continue
		}
		if q, rem := new(big.Int).QuoRem(d, five, m); rem.Sign() == 0 {
			d, fives = q, fives+1
			continue
		}
		break
	}
	exact = d.Cmp(big.NewInt(1)) == 0
	scale := places
	if exact {
		scale = max(twos, fives)
	}
	s = r.FloatString(scale)
	if scale == 0 {
		s += ".0"
	}
	return s, exact
}

// AvgPlaces is the digits after the point of an avg whose exact quotient
// does not end (1/3): it is rounded half away from zero to them.
const AvgPlaces = 20
