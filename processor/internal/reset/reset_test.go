package reset

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseTarget(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name             string
		earliest, latest bool
		datetime, offs   string
		want             Target
		wantErr          string
	}{
		{name: "earliest", earliest: true, want: Target{Kind: Earliest}},
		{name: "latest", latest: true, want: Target{Kind: Latest}},
		{name: "datetime utc", datetime: "2024-05-01T12:00:00Z", want: Target{Kind: Time, Time: at}},
		{name: "datetime with zone", datetime: "2024-05-01T14:00:00+02:00", want: Target{Kind: Time, Time: at}},
		{name: "offsets", offs: "0=10, 2=0", want: Target{Kind: Offsets, Offsets: map[int32]int64{0: 10, 2: 0}}},
		{name: "none", wantErr: "give exactly one of"},
		{name: "two", earliest: true, latest: true, wantErr: "give exactly one of"},
		{name: "datetime without zone", datetime: "2024-05-01T12:00:00", wantErr: "want RFC 3339"},
		{name: "offsets bad pair", offs: "0:10", wantErr: "want PARTITION=OFFSET"},
		{name: "offsets negative", offs: "0=-1", wantErr: "want PARTITION=OFFSET"},
		{name: "offsets twice", offs: "1=1,1=2", wantErr: "partition 1 given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTarget(tt.earliest, tt.latest, tt.datetime, tt.offs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrUsage) {
					t.Fatalf("err = %v, want a usage error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tt.want.Kind || !got.Time.Equal(tt.want.Time) || len(got.Offsets) != len(tt.want.Offsets) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for p, o := range tt.want.Offsets {
				if got.Offsets[p] != o {
					t.Fatalf("partition %d: %d, want %d", p, got.Offsets[p], o)
				}
			}
		})
	}
}

// The plan gives the topic ID in base64, the form of the positions table
// and the dead letters' exactly.dlq.source.topic_id header.
func TestPlanPrint(t *testing.T) {
	p := Plan{Kind: "stage", Name: "clean", Group: "exactly-clean", Topic: "orders.raw", TopicID: [16]byte{0xde, 0xad},
		Target: Target{Kind: Time, Time: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)}, Store: "consumer group exactly-clean",
		Changes: changes(map[int32]int64{1: 250, 0: 100, 2: 7}, map[int32]int64{0: 500, 1: 250})}
	var b strings.Builder
	p.Print(&b)
	want := `stage clean: reset orders.raw (topic ID 3q0AAAAAAAAAAAAAAAAAAA==) to time 2024-05-01T12:00:00Z, positions in consumer group exactly-clean
PARTITION  CURRENT  NEW  MOVE
0          500      100  -400
1          250      250  +0
2          none     7    -
`
	if b.String() != want {
		t.Errorf("plan:\n%s\nwant:\n%s", b.String(), want)
	}
	if got := p.Summary(false); got != "dry run: nothing changed; run again with --execute to reset 3 partitions." {
		t.Errorf("dry-run summary %q", got)
	}
	p.Changes = p.Changes[:1]
	if got := p.Summary(true); got != "done: reset 1 partition of stage clean." {
		t.Errorf("summary %q", got)
	}
}

func TestCommitMetadata(t *testing.T) {
	// The stage's format (operating.md, "Topic identity and start positions").
	got := CommitMetadata([16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	if got != "exactly/v1 topic_id=deadbeef0102030405060708090a0b0c" {
		t.Fatalf("metadata %q", got)
	}
}
