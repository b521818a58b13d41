// Package tcpproxy is a TCP proxy for fault injection in tests: one
// listener forwarding to one target, whose traffic can be cut, stalled or
// delayed while the target stays alive. The cluster tests put one in front
// of each Kafka broker, and the brokers advertise the proxies' ports, so a
// broker can be made unreachable to clients while it keeps replicating and
// heartbeating to the controller on listeners that are not proxied.
package tcpproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// ErrClosed is returned by Listen's proxy methods after Close.
var ErrClosed = errors.New("tcpproxy: closed")

// Proxy forwards every connection accepted on its address to its target.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool          // refuse: close every connection, accept and close new ones
	gate   chan struct{} // non-nil while stalled: closed by Restore
	delay  time.Duration // added to every chunk in both directions
	conns  map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup
}

// pair is one client connection and its connection to the target.
type pair struct{ client, server net.Conn }

func (p *pair) close() {
	_ = p.client.Close()
	_ = p.server.Close()
}

// reset closes c with a TCP RST instead of a FIN, as a host with nothing
// listening answers: the client sees "connection reset", not a clean end
// of stream in the middle of its handshake.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Listen starts a proxy on addr ("127.0.0.1:0" for any free port) that
// forwards to target. Close stops it.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen on %s: %w", addr, err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut resets every open connection and, until Restore, resets each new one
// at once: to a client the target looks down, though it is running.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[*pair]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		reset(c.client)
		_ = c.server.Close()
	}
}

// Stall stops forwarding bytes in both directions, until Restore, while
// every connection stays open and new ones are accepted: the target looks
// hung (a network partition without resets). Bytes read meanwhile are
// delivered after Restore.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// Delay adds d to the time every chunk of bytes takes through the proxy,
// in each direction (so a request and its response take 2d more); 0
// removes the delay.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Restore ends a Cut or a Stall and removes any Delay.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.delay = 0
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	conns := p.conns
	p.conns = nil
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client) // the target is down
		return
	}
	pr := &pair{client: client, server: server}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		pr.close()
		return
	}
	p.conns[pr] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client); pr.close() }()
	go func() { defer wg.Done(); p.pipe(client, server); pr.close() }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
}

// chunk is bytes read from one side at a time.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, holding each chunk back while stalled and for
// the current delay after it was read. It returns when src ends or dst
// fails; serve then closes both sides (Kafka has no use for half-closed
// connections).
func (p *Proxy) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{b: buf[:n], at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		p.mu.Lock()
		gate, delay := p.gate, p.delay
		p.mu.Unlock()
		if gate != nil {
			<-gate
		}
		if wait := time.Until(c.at.Add(delay)); wait > 0 {
			time.Sleep(wait) // the injected latency itself
		}
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close()
			for range ch { // let the reader end
			}
			return
		}
	}
}
