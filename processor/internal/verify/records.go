package verify

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/serde"
)

// Lineage record layout (42 bytes): partition, offset, kind, index, flags,
// event ID digest, timestamp (incarnation.go). Grouped on the first 12
// bytes: one group per source.
const (
	linSize, linKey = 42, 12
	idSize, idKey   = 17, 16
)

const (
	kIn byte = iota + 1
	kOut
	kDLQ
)

const (
	fPending byte = 1 << iota
	fDigest
	fTombstone
	fTime // the record's timestamp is known (incarnation.go)
)

// Event ID record kinds.
const (
	idIn byte = iota + 1
	idOut
	idExpected
	idMaybe
	idRow
	idDropped // an input of a dedupe stage with no output and no dead letter; the last kind (countIDKinds)
)

// eventID returns the digest of the event ID field of r's value.
func eventID(codec serde.Codec, r *kgo.Record, field string) ([16]byte, bool) {
	if r.Value == nil {
		return [16]byte{}, false
	}
	v, err := codec.Decode(r.Value)
	if err != nil {
		return [16]byte{}, false
	}
	for _, name := range strings.Split(field, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return [16]byte{}, false
		}
		if v, ok = m[name]; !ok {
			return [16]byte{}, false
		}
	}
	id, ok := idText(v)
	if !ok {
		return [16]byte{}, false
	}
	return sha(id), true
}

// idText renders an event ID as the sink stores it: a string as itself, a
// number as its digits, anything else as JSON.
func idText(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", false
	case string:
		return v, v != ""
	case json.Number:
		return string(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case bool:
		return strconv.FormatBool(v), true
	}
	b, err := json.Marshal(v)
	return string(b), err == nil
}

func sha(id string) [16]byte {
	s := sha256.Sum256([]byte(id))
	return [16]byte(s[:16])
}

func linBucket(p int32, o int64) int {
	return int((uint64(o)*0x9E3779B97F4A7C15 ^ uint64(p)*0xBF58476D1CE4E5B9) >> 58)
}

func linRecord(b []byte, p int32, o int64, kind byte, idx uint32, flags byte, digest [16]byte) []byte {
	binary.BigEndian.PutUint32(b[0:], uint32(p))
	binary.BigEndian.PutUint64(b[4:], uint64(o))
	b[12] = kind
	binary.BigEndian.PutUint32(b[13:], idx)
	b[17] = flags
	copy(b[18:34], digest[:])
	clear(b[34:linSize])
	return b
}

func idRecord(b []byte, digest [16]byte, kind byte) []byte {
	copy(b[:16], digest[:])
	b[16] = kind
	return b
}

// countIDKinds returns how many of recs, the id records of one event ID,
// are of each kind, indexed by kind (idIn to idDropped).
func countIDKinds(recs [][]byte) (n [idDropped + 1]int64) {
	for _, r := range recs {
		if k := r[16]; int(k) < len(n) {
			n[k]++
		}
	}
	return n
}

// group is one source record's lineage records.
type group struct {
	p         int32
	o         int64
	in        bool
	flags     byte
	digest    [16]byte
	outs, dlq int64
	dupOuts   int64
	// otherIncarnation counts outputs and dead letters naming this offset
	// that came from another record (an earlier incarnation of the input
	// topic): they are not in outs or dlq.
	otherIncarnation int64
}

func parseGroup(recs [][]byte) group {
	g := group{p: int32(binary.BigEndian.Uint32(recs[0][0:])), o: int64(binary.BigEndian.Uint64(recs[0][4:]))}
	var lastIdx uint32
	var in []byte // kIn sorts first in its group
	for i, r := range recs {
		switch r[12] {
		case kIn:
			g.in, g.flags = true, r[17]
			copy(g.digest[:], r[18:34])
			in = r
		case kOut:
			if in != nil && otherIncarnation(in, r) {
				g.otherIncarnation++
				continue
			}
			idx := binary.BigEndian.Uint32(r[13:])
			if g.outs > 0 && i > 0 && recs[i-1][12] == kOut && idx == lastIdx {
				g.dupOuts++
			}
			g.outs++
			lastIdx = idx
		case kDLQ:
			if in != nil && otherIncarnation(in, r) {
				g.otherIncarnation++
				continue
			}
			g.dlq++
		}
	}
	return g
}
