// Package netcut simulates a process crash inside one process: a Dialer
// whose connections can all be cut at once, after which it dials nothing.
// A client built on it stops talking to Kafka mid-request, as a client in a
// process killed with SIGKILL would, without ending the test process.
package netcut

import (
	"context"
	"errors"
	"net"
	"sync"
)

// ErrCut is returned by Dial once Cut was called.
var ErrCut = errors.New("network cut")

// Dialer hands out connections it can cut. The zero value is ready to use.
type Dialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
	d     net.Dialer
}

// Dial has the shape kgo.Dialer expects.
func (d *Dialer) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, ErrCut
	}
	c, err := d.d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, c)
	return c, nil
}

// Cut closes every connection and refuses all later dials.
func (d *Dialer) Cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}
