// Package plural writes counts for people: "1 stage", "2 stages".
package plural

import "strconv"

// Integer is any integer type a count is kept in.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Count returns n and the noun in the form that agrees with it: one for
// n == 1 (and -1), else many. many defaults to one with an "s" appended;
// give it for nouns that do not take a plain "s" ("entry", "entries").
func Count[N Integer](n N, one string, many ...string) string {
	return strconv.FormatInt(int64(n), 10) + " " + Noun(n, one, many...)
}

// Noun returns the form of the noun (or verb) that agrees with n, without
// n: Noun(n, "was", "were").
func Noun[N Integer](n N, one string, many ...string) string {
	if n == 1 || int64(n) == -1 {
		return one
	}
	if len(many) > 0 {
		return many[0]
	}
	return one + "s"
}
