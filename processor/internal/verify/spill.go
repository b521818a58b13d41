package verify

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// buckets is how many files a spill hashes its records into. One bucket is
// loaded and sorted at a time, so memory is about 1/buckets of the spill:
// for 10M events, a few tens of megabytes.
const buckets = 64

// spill is a set of fixed-size records on disk, hashed into buckets. It is
// the bounded-memory part of verify: records are appended while topics are
// read, then each bucket is read back, sorted on its first keyLen bytes, and
// walked in groups of equal keys.
type spill struct {
	size, keyLen int
	files        []*os.File
	w            []*bufio.Writer
	n            int64
}

func newSpill(dir, name string, size, keyLen int) (*spill, error) {
	s := &spill{size: size, keyLen: keyLen}
	for i := range buckets {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s.%02d", name, i)))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("spill: %w", err)
		}
		s.files = append(s.files, f)
		s.w = append(s.w, bufio.NewWriterSize(f, 4096))
	}
	return s, nil
}

func (s *spill) add(bucket int, rec []byte) error {
	s.n++
	if _, err := s.w[bucket%buckets].Write(rec[:s.size]); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	return nil
}

// groups calls fn for each run of records with an equal key, bucket by
// bucket, in key order within a bucket. recs are views into a buffer that
// is reused for the next bucket.
func (s *spill) groups(fn func(recs [][]byte) error) error {
	var buf []byte
	var recs [][]byte
	for i, f := range s.files {
		if err := s.w[i].Flush(); err != nil {
			return fmt.Errorf("spill: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("spill: %w", err)
		}
		if st.Size() == 0 {
			continue
		}
		buf = slices.Grow(buf[:0], int(st.Size()))[:st.Size()]
		if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
			return fmt.Errorf("spill: %w", err)
		}
		recs = recs[:0]
		for off := 0; off+s.size <= len(buf); off += s.size {
			recs = append(recs, buf[off:off+s.size])
		}
		k := s.keyLen
		slices.SortFunc(recs, func(a, b []byte) int { return bytes.Compare(a[:s.size], b[:s.size]) })
		for j := 0; j < len(recs); {
			e := j + 1
			for e < len(recs) && bytes.Equal(recs[e][:k], recs[j][:k]) {
				e++
			}
			if err := fn(recs[j:e]); err != nil {
				return err
			}
			j = e
		}
	}
	return nil
}

func (s *spill) close() {
	for _, f := range s.files {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
}
