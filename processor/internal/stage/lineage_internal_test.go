package stage

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLineageHeaders checks the lineage values of outputs, that an
// upstream stage's lineage is replaced and other headers kept, and that
// the values of two outputs (which share the stage's name bytes) cannot
// change each other.
func TestLineageHeaders(t *testing.T) {
	s := &Stage{cfg: Config{Stage: "clean", Input: "orders.raw"}, stageName: []byte("clean"), inputName: []byte("orders.raw")}
	upstream := []kgo.RecordHeader{
		{Key: "trace", Value: []byte("t1")},
		{Key: HeaderLineageStage, Value: []byte("up")},
		{Key: HeaderLineageOffset, Value: []byte("7")},
	}
	cases := []struct {
		name                      string
		topic                     string
		partition                 int32
		offset                    int64
		index                     int
		wantTopic, wantP, wantOff string
		wantIndex                 string
	}{
		{"first output", "orders.raw", 0, 0, 0, "orders.raw", "0", "0", "0"},
		{"large numbers", "orders.raw", 2147483647, 9223372036854775807, 123456, "orders.raw", "2147483647", "9223372036854775807", "123456"},
		{"another topic", "other", 3, 42, 1, "other", "3", "42", "1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := &kgo.Record{Topic: c.topic, Partition: c.partition, Offset: c.offset}
			hs := s.lineage(in, upstream, c.index)
			got := map[string]string{}
			for _, h := range hs {
				if _, dup := got[h.Key]; dup {
					t.Fatalf("header %q twice in %v", h.Key, hs)
				}
				got[h.Key] = string(h.Value)
			}
			want := map[string]string{"trace": "t1", HeaderLineageStage: "clean", HeaderLineageTopic: c.wantTopic,
				HeaderLineagePartition: c.wantP, HeaderLineageOffset: c.wantOff, HeaderLineageIndex: c.wantIndex}
			if len(got) != len(want) {
				t.Fatalf("headers %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
	t.Run("values do not alias", func(t *testing.T) {
		a := s.lineage(&kgo.Record{Topic: "orders.raw", Partition: 1, Offset: 5}, nil, 0)
		b := s.lineage(&kgo.Record{Topic: "orders.raw", Partition: 1, Offset: 6}, nil, 1)
		// Appending to one value (as a careless caller might) must not
		// write into the next value of the same record.
		for i := range a {
			_ = append(a[i].Value, 'x')
		}
		for _, h := range a {
			if h.Key == HeaderLineageOffset && string(h.Value) != "5" || h.Key == HeaderLineageIndex && string(h.Value) != "0" {
				t.Errorf("%s = %q after an append to its neighbour", h.Key, h.Value)
			}
		}
		for _, h := range b {
			if h.Key == HeaderLineageOffset && string(h.Value) != "6" {
				t.Errorf("second output's offset = %q, want 6", h.Value)
			}
		}
	})
}
