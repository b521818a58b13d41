//go:build integration

package integration

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A schema registry that refuses what asking again cannot change stops the
// stage with exit code 1, naming the HTTP status, and loses nothing: the
// output schema incompatible with its subject (HTTP 409, on the real
// registry) is found at start, before the stage reports ready; the
// credentials refused (401), at start or by a registry that starts
// refusing them once records flow; none is retried for ever while
// /readyz says ready.
func TestRegistryRefusalsStopTheStage(t *testing.T) {
	t.Parallel()
	t.Run("output schema incompatible with its subject", func(t *testing.T) {
		reg := registryURL(t)
		in, out, dlq, stage := uniqueName("rfo_in"), uniqueName("rfo_out"), uniqueName("rfo_dlq"), uniqueName("rfo")
		subject := out + "-value"
		if code := srCall(t, http.MethodPut, reg+"/config/"+url.PathEscape(subject), map[string]string{"compatibility": "FULL"}, nil); code/100 != 2 {
			t.Fatalf("PUT /config/%s: HTTP %d", subject, code)
		}
		srRegister(t, reg, subject, `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`)
		schema := schemaFile(t, "out.avsc", `{"type":"record","name":"R","fields":[{"name":"b","type":"long"}]}`)
		topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{{
			name: stage, in: in, out: out, dlq: dlq, inFormat: "json",
			outFormat: fmt.Sprintf("avro, schema: %s, registry: { url: %q }", schema, reg),
		}}}.write(t)
		exactlyCmd(t, "topics", "create", topo)
		kcatProduce(t, in, [][]byte{[]byte(`k|{"b":1}`)})

		code, logs := exactlyExit(t, nil, "run", "--topology", topo, "--instance-id", "i1", "--metrics-addr", "")
		if code != 1 || !strings.Contains(logs, "refused by the schema registry") || !strings.Contains(logs, "HTTP 409") || strings.Contains(logs, "transaction aborted; retrying") {
			t.Fatalf("exit %d, want 1 at start naming the refusal and HTTP 409, before any record:\n%s", code, tail(logs, 20))
		}
		// Nothing lost: once the subject takes the schema, the record
		// comes out, once.
		srCall(t, http.MethodPut, reg+"/config/"+url.PathEscape(subject), map[string]string{"compatibility": "NONE"}, nil)
		p := start(t, nil, "run", "--topology", topo, "--instance-id", "i1")
		eventually(t, time.Minute, func() bool { return kcatCount(t, out) == 1 }, func() string { return "the record did not come out\n" + tail(p.logs.String(), 20) })
		p.stop()
		if n := kcatCount(t, dlq); n != 0 {
			t.Errorf("%d dead letters, want 0", n)
		}
	})

	// A registry URL with a typo in its path: the real registry answers
	// 404 for a path it does not serve, which is no "schema not found"
	// (error code 40403), so valid records are not dead-lettered as an
	// unknown schema ID while /readyz says ready.
	t.Run("registry URL with a wrong path", func(t *testing.T) {
		reg := registryURL(t)
		in, out, dlq, stage := uniqueName("r404_in"), uniqueName("r404_out"), uniqueName("r404_dlq"), uniqueName("r404")
		id := srRegister(t, reg, in+"-value", `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`)
		topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{{
			name: stage, in: in, out: out, dlq: dlq, outFormat: "json",
			inFormat: fmt.Sprintf("avro, registry: { url: %q }", reg+"-typo"),
		}}}.write(t)
		exactlyCmd(t, "topics", "create", topo)
		framed := make([]byte, 5, 7)
		binary.BigEndian.PutUint32(framed[1:], uint32(id))
		kgoProduce(t, in, []*kgo.Record{{Topic: in, Key: []byte("k"), Value: append(framed, 2, 'x')}})

		code, logs := exactlyExit(t, nil, "run", "--topology", topo, "--instance-id", "i1", "--metrics-addr", "")
		if code != 1 || !strings.Contains(logs, "HTTP 404") || !strings.Contains(logs, "check the path of registry.url") || strings.Contains(logs, "transaction aborted; retrying") {
			t.Fatalf("exit %d, want 1 at start naming HTTP 404 and the URL's path:\n%s", code, tail(logs, 20))
		}
		if n, d := kcatCount(t, out), kcatCount(t, dlq); n != 0 || d != 0 {
			t.Fatalf("%d outputs and %d dead letters, want none: the record is not at fault", n, d)
		}
	})

	// A registry of our own that refuses the credentials: from the start,
	// or only once records come (the schema lookup by ID).
	for _, tc := range []struct {
		name    string
		atStart bool
		want    string // where the refusal is found
	}{
		{"credentials refused at start", true, "input registry: refused by the schema registry"},
		{"credentials refused once records come", false, "@0: decode: refused by the schema registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lookups atomic.Int64
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/schemas/types" && !tc.atStart {
					fmt.Fprint(w, `["AVRO"]`)
					return
				}
				lookups.Add(1)
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"error_code":401,"message":"Unauthorized"}`)
			}))
			defer fake.Close()
			in, out, dlq, stage := uniqueName("r401_in"), uniqueName("r401_out"), uniqueName("r401_dlq"), uniqueName("r401")
			topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{{
				name: stage, in: in, out: out, dlq: dlq, outFormat: "json",
				inFormat: fmt.Sprintf("avro, registry: { url: %q }", fake.URL),
			}}}.write(t)
			exactlyCmd(t, "topics", "create", topo)
			framed := make([]byte, 5, 6)
			binary.BigEndian.PutUint32(framed[1:], 7)
			kgoProduce(t, in, []*kgo.Record{{Topic: in, Key: []byte("k"), Value: append(framed, 0)}})

			code, logs := exactlyExit(t, nil, "run", "--topology", topo, "--instance-id", "i1", "--metrics-addr", "")
			if code != 1 || !strings.Contains(logs, tc.want) || !strings.Contains(logs, "HTTP 401") || strings.Contains(logs, "transaction aborted; retrying") {
				t.Fatalf("exit %d, want 1 with %q and HTTP 401, no retry:\n%s", code, tc.want, tail(logs, 20))
			}
			if n, d := kcatCount(t, out), kcatCount(t, dlq); n != 0 || d != 0 {
				t.Fatalf("%d outputs and %d dead letters, want none: the record is not the fault", n, d)
			}
			if lookups.Load() == 0 {
				t.Fatal("the registry was never asked")
			}
		})
	}
}
