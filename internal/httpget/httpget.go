// Package httpget reads an HTTP endpoint of a running exactly process
// (/readyz, /metrics) the way the tests of several packages do.
package httpget

import (
	"io"
	"net/http"
)

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
