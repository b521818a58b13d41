package dlq

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestEnvelope(t *testing.T) {
	bigKey := []byte(strings.Repeat("k", EnvelopeKeyMax+1))
	tests := []struct {
		name      string
		key       []byte
		extra     []kgo.RecordHeader
		wantKey   []byte
		wantExtra map[string]string // headers beyond the dlq ones
	}{
		{"small key kept", []byte("k1"), nil, []byte("k1"), map[string]string{deadletter.HeaderValueOmitted: "6000"}},
		{"key at the bound kept", bigKey[:EnvelopeKeyMax], nil, bigKey[:EnvelopeKeyMax], map[string]string{deadletter.HeaderValueOmitted: "6000"}},
		{"large key omitted", bigKey, nil, nil,
			map[string]string{deadletter.HeaderValueOmitted: "6000", deadletter.HeaderKeyOmitted: fmt.Sprint(EnvelopeKeyMax + 1)}},
		{"extra headers last", nil, []kgo.RecordHeader{{Key: "x.sqlstate", Value: []byte("23505")}}, nil,
			map[string]string{deadletter.HeaderValueOmitted: "6000", "x.sqlstate": "23505"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &kgo.Record{Topic: "in", Partition: 2, Offset: 41, Key: tt.key, Value: make([]byte, 6000),
				Timestamp: time.UnixMilli(1700), Headers: []kgo.RecordHeader{{Key: "own", Value: []byte("h")}}}
			re := &RecordError{Reason: deadletter.ReasonTransform, Step: "clean", Err: errors.New("boom")}
			before := time.Now()
			env := Envelope("dlq", "st", r, re, tt.extra...)
			if env.Topic != "dlq" || env.Value != nil || string(env.Key) != string(tt.wantKey) || env.Timestamp.Before(before) {
				t.Fatalf("envelope topic %q key %d bytes value %d bytes timestamp %v", env.Topic, len(env.Key), len(env.Value), env.Timestamp)
			}
			want := map[string]string{
				deadletter.HeaderReason: deadletter.ReasonTransform, deadletter.HeaderStep: "clean", deadletter.HeaderError: "boom", deadletter.HeaderStage: "st",
				deadletter.HeaderSourceTopic: "in", deadletter.HeaderSourcePartition: "2", deadletter.HeaderSourceOffset: "41", deadletter.HeaderSourceTimestamp: "1700",
			}
			for k, v := range tt.wantExtra {
				want[k] = v
			}
			got := map[string]string{}
			for _, h := range env.Headers {
				if _, dup := got[h.Key]; dup {
					t.Fatalf("header %q twice", h.Key)
				}
				got[h.Key] = string(h.Value)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("headers\n got %v\nwant %v", got, want)
			}
			if env.Headers[0].Key != deadletter.HeaderValueOmitted {
				t.Fatalf("first header %q, want %q", env.Headers[0].Key, deadletter.HeaderValueOmitted)
			}
			if len(tt.extra) > 0 && env.Headers[len(env.Headers)-1].Key != tt.extra[0].Key {
				t.Fatalf("last header %q, want the extra %q", env.Headers[len(env.Headers)-1].Key, tt.extra[0].Key)
			}
			// The envelope's size is bounded by its headers, whatever the value's.
			if size := len(env.Key) + headersSize(env.Headers); size > EnvelopeKeyMax+512 {
				t.Fatalf("envelope of %d bytes", size)
			}
		})
	}
}

func headersSize(hs []kgo.RecordHeader) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

func TestIsRecordFault(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{kerr.MessageTooLarge, true},
		{fmt.Errorf("produce: %w", kerr.RecordListTooLarge), true},
		{kerr.InvalidRecord, true},
		{kerr.InvalidTimestamp, true},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.NotLeaderForPartition, false},
		{kerr.UnknownTopicOrPartition, false},
		{errors.New("message too large"), false}, // codes, never message text
		{nil, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			if got := IsRecordFault(tt.err); got != tt.want {
				t.Fatalf("IsRecordFault(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
