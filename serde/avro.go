package serde

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// Avro is the format name of Avro codecs, built with NewCodec.
const Avro = "avro"

// DefaultRegistryTimeout bounds one schema registry request.
const DefaultRegistryTimeout = 10 * time.Second

// Config describes a codec for NewCodec.
type Config struct {
	// Format is json, string, bytes or avro.
	Format string
	// SchemaFile is the path of an Avro schema (.avsc). Without a registry
	// the codec reads and writes raw Avro binary with it; with a registry
	// it is the schema the codec writes (and registers).
	SchemaFile string
	// Schema is the schema text, used instead of SchemaFile when set.
	Schema string
	// Registry, when its URL is set, frames values in the Confluent wire
	// format (magic byte 0, 4-byte big-endian schema ID, Avro binary).
	Registry Registry
	// Topic is the topic the codec serves; the default subject is
	// "<Topic>-value" (TopicNameStrategy).
	Topic string
}

// Registry is how a codec reaches a Confluent-compatible schema registry.
type Registry struct {
	URL string
	// Subject is where Encode registers its schema; default
	// "<topic>-value".
	Subject string
	// ReaderSchema, when set, is what Decode resolves each record's writer
	// schema to (new fields get their defaults, removed fields are dropped).
	// It is a path to an .avsc file, or the schema JSON itself.
	ReaderSchema string
	// Username and Password are sent as HTTP basic auth when Username is set.
	// PasswordFile, when set, names a file holding the password instead
	// (one trailing newline dropped); NewCodec reads it.
	Username, Password string
	PasswordFile       string
	// CAFile is a PEM file of CA certificates an https registry's
	// certificate must chain to; default the system's roots.
	CAFile string
	// InsecureSkipVerify accepts any registry certificate: tests only.
	InsecureSkipVerify bool
	// Timeout bounds one request; default DefaultRegistryTimeout.
	Timeout time.Duration
}

// String leaves out the credentials.
func (r Registry) String() string {
	return fmt.Sprintf("{url:%s subject:%s reader_schema:%s}", redactURL(r.URL), r.Subject, r.ReaderSchema)
}

// NewCodec returns the codec cfg describes. It reads schema files but does
// no network I/O: an output codec registers its schema on its first Encode,
// so that a registry that is down delays a stage instead of failing it.
func NewCodec(cfg Config) (Codec, error) {
	if cfg.Format != Avro {
		if cfg.SchemaFile != "" || cfg.Schema != "" || cfg.Registry.URL != "" {
			return nil, fmt.Errorf("%w: a schema or registry needs format avro, not %q", ErrConfig, cfg.Format)
		}
		return New(cfg.Format)
	}
	c := &avroCodec{}
	s, err := writerSchema(cfg)
	if err != nil {
		return nil, err
	}
	c.writer = s
	if cfg.Registry.URL == "" {
		if c.writer == nil {
			return nil, fmt.Errorf("%w: format avro needs a schema file or a registry", ErrConfig)
		}
		if cfg.Registry.ReaderSchema != "" {
			return nil, fmt.Errorf("%w: a reader schema needs a registry", ErrConfig)
		}
		return c, nil
	}
	reg, err := newRegistry(cfg.Registry)
	if err != nil {
		return nil, err
	}
	c.reg = reg
	c.subject = cfg.Registry.Subject
	if c.subject == "" {
		c.subject = cfg.Topic + "-value"
	}
	if c.reader, err = readerSchema(cfg.Registry.ReaderSchema); err != nil {
		return nil, err
	}
	return c, nil
}

// writerSchema is the schema cfg gives, as text or in a file; nil for
// none.
func writerSchema(cfg Config) (*avroSchema, error) {
	text := cfg.Schema
	if text == "" && cfg.SchemaFile != "" {
		b, err := os.ReadFile(cfg.SchemaFile)
		if err != nil {
			return nil, fmt.Errorf("%w: avro schema: %v", ErrConfig, err)
		}
		text = string(b)
	}
	if text == "" {
		return nil, nil
	}
	s, err := newAvroSchema(text)
	if err != nil {
		return nil, fmt.Errorf("%w: avro schema %s: %v", ErrConfig, cfg.SchemaFile, err)
	}
	return s, nil
}

// readerSchema is the reader schema rs, a schema's JSON text or the path
// of its file; nil for "".
func readerSchema(rs string) (*avroSchema, error) {
	if rs == "" {
		return nil, nil
	}
	text := rs
	if t := strings.TrimSpace(rs); !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, "[") && !strings.HasPrefix(t, `"`) {
		b, err := os.ReadFile(rs)
		if err != nil {
			return nil, fmt.Errorf("%w: reader schema: %v", ErrConfig, err)
		}
		text = string(b)
	}
	s, err := newAvroSchema(text)
	if err != nil {
		return nil, fmt.Errorf("%w: reader schema: %v", ErrConfig, err)
	}
	return s, nil
}

// avroCodec reads and writes Avro, raw (reg == nil) or framed in the
// Confluent wire format.
type avroCodec struct {
	writer  *avroSchema // what Encode writes; what raw Decode reads
	reader  *avroSchema // what framed Decode resolves to; nil means the writer's
	reg     *registry
	subject string
}

var confluent sr.ConfluentHeader

func (*avroCodec) Format() string { return Avro }

// Decode reads one Avro datum, which must take every byte of b.
func (c *avroCodec) Decode(b []byte) (v any, err error) {
	if b == nil {
		return nil, ErrNullValue
	}
	defer func() {
		if r := recover(); r != nil { // goavro must not take the stage down
			v, err = nil, fmt.Errorf("%w: avro decoder panicked: %v", ErrSyntax, r)
		}
	}()
	w, r := c.writer, c.writer
	where := "datum"
	if c.reg != nil {
		if len(b) < 5 {
			return nil, fmt.Errorf("%w: %d bytes, shorter than the 5-byte header (magic byte 0, 4-byte schema ID)", ErrFrame, len(b))
		}
		if b[0] != 0 {
			return nil, fmt.Errorf("%w: magic byte 0x%02x, want 0x00 (not the Confluent wire format)", ErrFrame, b[0])
		}
		id, rest, err := confluent.DecodeID(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFrame, err)
		}
		if w, err = c.reg.schema(id); err != nil {
			return nil, err
		}
		r = w
		if c.reader != nil {
			r = c.reader
		}
		b = rest
		where = fmt.Sprintf("datum with schema id %d", id)
	}
	native, rest, err := w.codec.NativeFromBinary(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not match its schema: %v", ErrSyntax, where, err)
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after the %s", ErrSyntax, len(rest), where)
	}
	v, err = fromAvro(w.typ, r.typ, native)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if v == nil {
		return nil, ErrNullValue
	}
	return v, nil
}

// Encode writes v with the writer schema, after registering it when the
// codec has a registry.
func (c *avroCodec) Encode(v any) ([]byte, error) {
	if v == nil {
		// Decode refuses a null datum (ErrNullValue): what is written is
		// what every reader here takes, so neither is it written, even
		// where the schema is a union with null.
		return nil, fmt.Errorf("%w: the value is null, which carries no event", ErrNullValue)
	}
	if c.writer == nil {
		return nil, fmt.Errorf("%w: no avro schema to write with (set a schema file)", ErrUnsupported)
	}
	n, err := toAvro(c.writer.typ, v)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, 64)
	if c.reg != nil {
		id, err := c.reg.register(c.subject, c.writer)
		if err != nil {
			return nil, err
		}
		buf, _ = confluent.AppendEncode(buf, id, nil)
	}
	out, err := c.writer.codec.BinaryFromNative(buf, n)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	return out, nil
}

// registry caches the schemas of a schema registry by ID. Failures are not
// cached: the next record asks again.
type registry struct {
	cl      *sr.Client
	timeout time.Duration

	mu   sync.RWMutex
	byID map[int]*avroSchema

	regMu sync.Mutex
	ids   map[string]int // subject -> ID of the writer schema, once registered
}

func newRegistry(cfg Registry) (*registry, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: registry url %s: want http(s)://host[:port]", ErrConfig, redactURL(cfg.URL))
	}
	user, pass := cfg.Username, cfg.Password
	if u.User != nil { // keep credentials out of the URLs that errors show
		if user == "" {
			user = u.User.Username()
			pass, _ = u.User.Password()
		}
		u.User = nil
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultRegistryTimeout
	}
	if cfg.PasswordFile != "" {
		b, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("%w: registry password_file: %v", ErrConfig, err)
		}
		pass = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	}
	hc, err := registryHTTPClient(cfg, timeout)
	if err != nil {
		return nil, err
	}
	opts := []sr.ClientOpt{
		sr.URLs(u.String()),
		sr.HTTPClient(hc),
		sr.UserAgent("exactly"),
	}
	if user != "" {
		opts = append(opts, sr.BasicAuth(user, pass))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: registry: %v", ErrConfig, err)
	}
	return &registry{cl: cl, timeout: timeout, byID: make(map[int]*avroSchema), ids: make(map[string]int)}, nil
}

// registryHTTPClient is the HTTP client for the registry cfg describes:
// with its CA file, or without verifying its certificate, if it says so.
func registryHTTPClient(cfg Registry, timeout time.Duration) (*http.Client, error) {
	hc := &http.Client{Timeout: timeout}
	if cfg.CAFile == "" && !cfg.InsecureSkipVerify {
		return hc, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // opt-in
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: registry ca_file: %v", ErrConfig, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: registry ca_file: no PEM certificate in %s", ErrConfig, cfg.CAFile)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	hc.Transport = tr
	return hc, nil
}

// schema returns the writer schema with ID id. A 404 is permanent
// (ErrUnknownSchema); any other failure is transient (ErrTransient).
func (r *registry) schema(id int) (*avroSchema, error) {
	r.mu.RLock()
	s, ok := r.byID[id]
	r.mu.RUnlock()
	if ok {
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	got, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		if registryNotFound(err) {
			return nil, fmt.Errorf("%w: schema id %d: the registry does not have it", ErrUnknownSchema, id)
		}
		return nil, fmt.Errorf("%w: schema id %d: %s", registryErrClass(err, false), id, registryErrText(err))
	}
	if got.Type != sr.TypeAvro {
		return nil, fmt.Errorf("%w: schema id %d is %s, not avro", ErrSyntax, id, got.Type)
	}
	if len(got.References) > 0 {
		return nil, fmt.Errorf("%w: schema id %d has references, which are not supported", ErrSyntax, id)
	}
	s, err = newAvroSchema(got.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: schema id %d: %v", ErrSyntax, id, err)
	}
	r.mu.Lock()
	r.byID[id] = s
	r.mu.Unlock()
	return s, nil
}

// register returns the ID of s under subject, registering it the first
// time. Registering is idempotent: an existing schema keeps its ID. When
// registering is not allowed (read-only credentials), a lookup finds the ID.
// No failure is the record's: it is ErrRegistryRefused or ErrTransient
// (registryErrClass), since an incompatible schema must stop the stage,
// not dead-letter all its records.
func (r *registry) register(subject string, s *avroSchema) (int, error) {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if id, ok := r.ids[subject]; ok {
		return id, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	schema := sr.Schema{Schema: s.text, Type: sr.TypeAvro}
	id, err := r.cl.RegisterSchema(ctx, subject, schema, -1, -1)
	if err != nil {
		got, lerr := r.cl.LookupSchema(ctx, subject, schema)
		if lerr != nil {
			return 0, fmt.Errorf("%w: register schema under subject %q: %s (and it is not registered there: %s)",
				registryErrClass(err, true), subject, registryErrText(err), registryErrText(lerr))
		}
		id = got.ID
	}
	r.ids[subject] = id
	r.mu.Lock()
	r.byID[id] = s
	r.mu.Unlock()
	return id, nil
}

// registryNotFound reports whether err is the registry's own "not found"
// for a subject, version or schema: HTTP 404 with an error code 40401 to
// 40499 (40403 is "schema not found"; the Confluent Schema Registry API
// reference, Errors). A 404 without such a code is a path the server does
// not serve: the URL is wrong (registryUnknownPath).
func registryNotFound(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound && re.ErrorCode/100 == 404
}

// registryUnknownPath reports whether err is a 404 for a path the server
// does not serve (a typo in the URL's path, a URL that is no registry),
// not a registry's own "not found" (registryNotFound).
func registryUnknownPath(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound && re.ErrorCode/100 != 404
}

// registryErrClass is the class of a registry request's failure: a
// status that asking again cannot change is ErrRegistryRefused (401 and
// 403, the credentials; for a registration, 409 and 422, the schema, per
// the Confluent Schema Registry API; a 404 for a path that the server does
// not serve, a wrong URL, or 405 for a URL that names a resource of the
// API rather than its root), anything else ErrTransient (5xx, 429, a
// timeout, a connection refused).
func registryErrClass(err error, registering bool) error {
	if registryUnknownPath(err) {
		return ErrRegistryRefused
	}
	var re *sr.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusMethodNotAllowed:
			// 405: the URL names a resource of the API, not its root
			// (".../subjects"): no retry changes the method's meaning.
			return ErrRegistryRefused
		case http.StatusConflict, http.StatusUnprocessableEntity:
			if registering {
				return ErrRegistryRefused
			}
		}
	}
	return ErrTransient
}

// registryErrText is err with the HTTP status named, which a registry's
// own message may not give, and for a path the server does not serve, the
// likely cause.
func registryErrText(err error) string {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode != 0 {
		text := fmt.Sprintf("HTTP %d %s: %v", re.StatusCode, http.StatusText(re.StatusCode), truncateText(strings.TrimSpace(err.Error())))
		if registryUnknownPath(err) || re.StatusCode == http.StatusMethodNotAllowed {
			text += fmt.Sprintf(" (no schema registry API at this URL, %s %s: check the path of registry.url)", re.Method, redactURL(re.URL))
		}
		return text
	}
	return err.Error()
}

// CheckRegistry asks the schema registry of codec c, if it has one, what
// its first record would: an output codec registers its writer schema
// (so that a schema the subject refuses is found before the first
// record), an input codec checks that the registry accepts its
// credentials and that the URL serves the registry API (GET
// /schemas/types, or GET /subjects where that is missing). Errors are ErrRegistryRefused (not
// worth a retry) or ErrTransient; a codec without a registry returns nil.
func CheckRegistry(ctx context.Context, c Codec) error {
	ac, ok := c.(*avroCodec)
	if !ok || ac.reg == nil {
		return nil
	}
	if ac.writer != nil && ac.subject != "" {
		_, err := ac.reg.register(ac.subject, ac.writer)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ac.reg.timeout)
	defer cancel()
	_, err := ac.reg.cl.SupportedTypes(ctx)
	if registryUnknownPath(err) {
		// A registry without the endpoint (Confluent's before 5.5), or a
		// URL with no registry there: every registry serves /subjects.
		_, err = ac.reg.cl.Subjects(ctx)
	}
	if err != nil {
		return fmt.Errorf("%w: schema registry: %s", registryErrClass(err, false), registryErrText(err))
	}
	return nil
}

// redactURL drops the user information of a URL for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "[unparsable url]"
	}
	if u.User != nil {
		u.User = url.User("[redacted]")
	}
	return u.String()
}
