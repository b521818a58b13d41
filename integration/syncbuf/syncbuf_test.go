package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Writers and a reader at the same time (run with -race): every write
// arrives whole, and a read never sees part of a write.
func TestBufferConcurrentWritesAndReads(t *testing.T) {
	const writers, writes = 8, 200
	var b Buffer
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range writes {
				_, _ = b.Write([]byte("line\n"))
			}
		})
	}
	stop, partial := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(partial)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s := b.String(); s != "" && !strings.HasSuffix(s, "\n") {
				partial <- s
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	if s, ok := <-partial; ok {
		t.Errorf("read part of a write: ...%q", s[max(0, len(s)-10):])
	}
	if got, want := b.String(), strings.Repeat("line\n", writers*writes); got != want {
		t.Errorf("%d bytes, want %d", len(got), len(want))
	}
}
