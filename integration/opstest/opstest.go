// Package opstest is for the tests of several packages (the CLI's, the
// integration tests) that run an exactly process with its ops endpoint:
// an address to serve it on, and what its /readyz and /metrics answer.
package opstest

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// FreeAddr returns a loopback address with a free port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Get returns the status code and body of url, or 0 and the error's text
// when it cannot be read (the process is not listening yet).
func Get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
