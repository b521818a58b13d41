package tcpproxy

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line on c and reads the echo, within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	_ = c.SetDeadline(t0.Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	l, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if l != "ping\n" {
		return 0, errors.New("bad echo " + l)
	}
	return time.Since(t0), nil
}

func TestProxy(t *testing.T) {
	tests := []struct {
		name  string
		fault func(p *Proxy)
		// check runs on a connection opened before the fault.
		check func(t *testing.T, p *Proxy, c net.Conn, r *bufio.Reader)
	}{
		{"forwards", func(*Proxy) {}, func(t *testing.T, _ *Proxy, c net.Conn, r *bufio.Reader) {
			if _, err := roundTrip(c, r, 2*time.Second); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut closes and refuses", (*Proxy).Cut, func(t *testing.T, p *Proxy, c net.Conn, r *bufio.Reader) {
			if _, err := roundTrip(c, r, 2*time.Second); err == nil {
				t.Fatal("an open connection still answers after Cut")
			}
			// A cut proxy may refuse the dial outright or accept and then
			// reset: either way nothing may answer.
			if c2, err := net.Dial("tcp", p.Addr()); err == nil {
				defer c2.Close()
				if _, err := roundTrip(c2, bufio.NewReader(c2), 2*time.Second); err == nil {
					t.Fatal("a new connection answers after Cut")
				}
			}
			p.Restore()
			c3, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c3.Close()
			if _, err := roundTrip(c3, bufio.NewReader(c3), 2*time.Second); err != nil {
				t.Fatalf("after Restore: %v", err)
			}
		}},
		{"stall holds bytes until restore", (*Proxy).Stall, func(t *testing.T, p *Proxy, c net.Conn, r *bufio.Reader) {
			if _, err := roundTrip(c, r, 300*time.Millisecond); err == nil {
				t.Fatal("a stalled proxy forwarded")
			}
			p.Restore()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if l, err := r.ReadString('\n'); err != nil || l != "ping\n" {
				t.Fatalf("after Restore the held echo is %q, %v", l, err)
			}
		}},
		{"delay", func(p *Proxy) { p.Delay(150 * time.Millisecond) }, func(t *testing.T, _ *Proxy, c net.Conn, r *bufio.Reader) {
			d, err := roundTrip(c, r, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if d < 300*time.Millisecond {
				t.Fatalf("round trip %s, want at least 2×150ms", d)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Listen("127.0.0.1:0", echoServer(t))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			if _, err := roundTrip(c, r, 2*time.Second); err != nil {
				t.Fatalf("before the fault: %v", err)
			}
			tt.fault(p)
			tt.check(t, p, c, r)
		})
	}
}

func TestCloseTwice(t *testing.T) {
	p, err := Listen("127.0.0.1:0", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
}
