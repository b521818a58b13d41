package testrun

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/cmd/exactly/internal/plural"
	"github.com/exactly-io/exactly/processor/deadletter"
)

// TopicDiff compares one topic: each record as one line of text holding
// exactly what is compared.
type TopicDiff struct {
	Topic       string
	DeadLetters bool
	Expected    []string
	Actual      []string
	// Notes are shown after an actual line in a diff but not compared:
	// a dead letter's error and step.
	Notes []string
}

// OK reports whether the topic holds the records expected.
func (d TopicDiff) OK() bool { return slices.Equal(d.Expected, d.Actual) }

// compare lines up the records read with the fixture's, topic by topic:
// the fixture's topics in its order, then the other written topics by
// name (expected empty).
func compare(fx *Fixture, written map[string]bool, recs []*kgo.Record, ranks map[position][]int) []TopicDiff {
	byPos := map[position]*kgo.Record{}
	byTopic := map[string][]*kgo.Record{}
	for _, r := range recs {
		byPos[position{r.Topic, r.Partition, r.Offset}] = r
		if _, ok := written[r.Topic]; ok {
			byTopic[r.Topic] = append(byTopic[r.Topic], r)
		}
	}
	rk := &ranker{ranks: ranks, byPos: byPos}
	expected := map[string][]Record{}
	var order []string
	for _, trs := range [][]TopicRecords{fx.Output, fx.DeadLetters} {
		for _, tr := range trs {
			expected[tr.Topic] = tr.Records
			order = append(order, tr.Topic)
		}
	}
	var rest []string
	for t := range written {
		if _, ok := expected[t]; !ok {
			rest = append(rest, t)
		}
	}
	slices.Sort(rest)
	var out []TopicDiff
	for _, t := range append(order, rest...) {
		dlq := written[t]
		d := TopicDiff{Topic: t, DeadLetters: dlq}
		for _, r := range expected[t] {
			d.Expected = append(d.Expected, fixtureLine(r, dlq))
		}
		actual := byTopic[t]
		slices.SortStableFunc(actual, func(a, b *kgo.Record) int { return slices.Compare(rk.rank(a, 0), rk.rank(b, 0)) })
		for _, r := range actual {
			line, note := recordLine(r, dlq)
			d.Actual = append(d.Actual, line)
			d.Notes = append(d.Notes, note)
		}
		out = append(out, d)
	}
	return out
}

// ranker orders records by the input record they came from.
type ranker struct {
	ranks map[position][]int
	byPos map[position]*kgo.Record
}

// rank is the input's position in the fixture, then for each stage on
// the way the output's index among its input's outputs. A record whose
// source is unknown sorts last, by offset.
func (rk *ranker) rank(r *kgo.Record, depth int) []int {
	if rank, ok := rk.ranks[position{r.Topic, r.Partition, r.Offset}]; ok {
		return rank
	}
	src, index, ok := source(r)
	if s, found := rk.byPos[src]; ok && found && depth < 64 {
		return append(slices.Clone(rk.rank(s, depth+1)), index)
	}
	if rank, found := rk.ranks[src]; ok && found {
		return append(slices.Clone(rank), index)
	}
	return []int{math.MaxInt, int(r.Partition), int(r.Offset)}
}

func fixtureLine(r Record, dlq bool) string {
	return line(dlq, r.Reason, r.Key, r.Value, r.Headers)
}

// recordLine is fixtureLine for a record read, and the note shown beside
// it.
func recordLine(r *kgo.Record, dlq bool) (string, string) {
	var hs []Header
	var reason, errText, step string
	for _, h := range r.Headers {
		switch {
		case h.Key == deadletter.HeaderReason:
			reason = string(h.Value)
		case h.Key == deadletter.HeaderError:
			errText = string(h.Value)
		case h.Key == deadletter.HeaderStep:
			step = string(h.Value)
		case strings.HasPrefix(h.Key, "exactly."):
		default:
			hs = append(hs, Header{Key: h.Key, Value: string(h.Value)})
		}
	}
	var note string
	if dlq {
		switch {
		case step != "" && errText != "":
			note = step + ": " + errText
		default:
			note = step + errText
		}
	}
	return line(dlq, reason, r.Key, r.Value, hs), note
}

// line renders what is compared of a record. Headers are sorted: their
// order is not compared.
func line(dlq bool, reason string, key, value []byte, hs []Header) string {
	var b strings.Builder
	if dlq {
		b.WriteString("reason: " + quote([]byte(reason)) + ", ")
	}
	b.WriteString("key: " + quote(key) + ", value: " + quote(value))
	if len(hs) > 0 {
		hs = slices.Clone(hs)
		slices.SortStableFunc(hs, func(a, b Header) int {
			return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Value, b.Value))
		})
		b.WriteString(", headers: {")
		for i, h := range hs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quote([]byte(h.Key)) + ": " + quote([]byte(h.Value)))
		}
		b.WriteString("}")
	}
	return b.String()
}

// quote writes bytes the way a fixture can hold them: ~ for null, a
// single-quoted YAML string for printable UTF-8, else value_base64 style
// as a Go-quoted string with its bytes escaped.
func quote(b []byte) string {
	if b == nil {
		return "~"
	}
	s := string(b)
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	return strconv.Quote(s)
}

// WriteDiff writes the differences of r for people: per topic that
// differs, every record, "-" for one expected and not read, "+" for one
// read and not expected, "  " for one that matched.
func (r *Result) WriteDiff(w io.Writer) {
	for _, t := range r.Topics {
		if t.OK() {
			continue
		}
		kind := "outputs"
		if t.DeadLetters {
			kind = "dead letters"
		}
		fmt.Fprintf(w, "%s (%s): expected %d, got %d\n", t.Topic, kind, len(t.Expected), len(t.Actual))
		for _, op := range diff(t.Expected, t.Actual) {
			switch op.kind {
			case ' ':
				fmt.Fprintf(w, "    %s\n", t.Expected[op.i])
			case '-':
				fmt.Fprintf(w, "  - %s\n", t.Expected[op.i])
			case '+':
				fmt.Fprintf(w, "  + %s", t.Actual[op.j])
				if n := t.Notes[op.j]; n != "" {
					fmt.Fprintf(w, "    # %s", n)
				}
				fmt.Fprintln(w)
			}
		}
	}
}

// Summary is one line about a run that passed.
func (r *Result) Summary() string {
	return fmt.Sprintf("%s, %s in, %s and %s as expected (%s)",
		plural.Count(r.Stages, "stage"), plural.Count(r.In, "record"), plural.Count(r.Out, "output"),
		plural.Count(r.DeadLettered, "dead letter"), r.Elapsed.Round(time.Millisecond))
}

type op struct {
	kind byte // ' ', '-' or '+'
	i, j int  // index into expected, actual
}

// diff is the longest-common-subsequence diff of a and b.
func diff(a, b []string) []op {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []op
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, op{' ', i, j})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			ops = append(ops, op{'-', i, j})
			i++
		default:
			ops = append(ops, op{'+', i, j})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, op{'-', i, j})
	}
	for ; j < m; j++ {
		ops = append(ops, op{'+', i, j})
	}
	return ops
}
