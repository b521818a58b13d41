package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/exactly-io/exactly/serde"
)

var (
	// stageName keeps stage names safe inside transactional IDs and group
	// names.
	stageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
)

func (v *validator) validate() {
	f := v.f
	switch {
	case !v.has("version"):
		v.report("version", "required (set version: 1)")
	case f.Version != 1:
		v.report("version", "unsupported version %s (want 1)", v.num("version", strconv.Itoa(f.Version)))
	}
	v.checkSpec()
	v.kafka()
	declared := v.topics()
	v.stages(declared)
	v.cycles()
	v.sinks(declared)
}

func (v *validator) kafka() {
	k := v.f.Kafka
	if len(k.Brokers) == 0 {
		if v.brokersByEnv {
			v.d.add(Position{}, "kafka.brokers", "%s lists no brokers (want host:port,host:port)", BrokersEnv)
		} else {
			v.report("kafka.brokers", `at least one broker is required (e.g. brokers: ["127.0.0.1:9092"], or set %s)`, BrokersEnv)
		}
	}
	for i, b := range k.Brokers {
		p := fmt.Sprintf("kafka.brokers[%d]", i)
		why := brokerProblem(b)
		switch {
		case why == "":
		case v.brokersByEnv:
			v.d.add(Position{}, p, "invalid broker address in %s: %s (want host:port)", BrokersEnv, why)
		default:
			v.report(p, "invalid broker address %s: %s (want host:port, e.g. 127.0.0.1:9092)", v.q(p, b), why)
		}
	}
	v.kafkaTLS()
	v.kafkaSASL()
}

// brokerProblem says what is wrong with a host:port address, without
// repeating it.
func brokerProblem(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// AddrError.Err does not repeat the address, which may be secret.
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return ae.Err
		}
		return "not host:port"
	}
	if host == "" {
		return "missing host"
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return "port is not a number"
	}
	if n < 1 || n > 65535 {
		return "port out of range 1-65535"
	}
	return ""
}

// topics checks the topic list and returns the set of declared names.
func (v *validator) topics() map[string]bool {
	declared := make(map[string]bool)
	first := make(map[string]int)  // name -> index of first declaration
	metric := make(map[string]int) // name with '.' as '_' -> index
	for i, t := range v.f.Topics {
		p := fmt.Sprintf("topics[%d]", i)
		np := p + ".name"
		if t.Name != "" {
			declared[t.Name] = true
		}
		switch why := topicNameProblem(t.Name); {
		case t.Name == "" && v.has(np):
			v.report(np, "must not be empty")
		case t.Name == "":
			v.report(np, "required")
		case why != "":
			v.report(np, "invalid topic name %s: %s", v.q(np, t.Name), why)
		default:
			if j, dup := first[t.Name]; dup {
				v.report(np, "duplicate topic %s (first declared at line %d)", v.q(np, t.Name), v.at(fmt.Sprintf("topics[%d].name", j)).Line)
				break
			}
			first[t.Name] = i
			// Kafka refuses to create topics whose names differ only in '.'
			// versus '_', since both map to '_' in metric names.
			m := strings.ReplaceAll(t.Name, ".", "_")
			if j, clash := metric[m]; clash {
				jp := fmt.Sprintf("topics[%d].name", j)
				v.report(np, "topic %s collides with %s (Kafka treats '.' and '_' alike in topic names)", v.q(np, t.Name), v.q(jp, v.f.Topics[j].Name))
				break
			}
			metric[m] = i
		}

		if pp := p + ".partitions"; !v.has(pp) {
			v.report(pp, "required (number of partitions, at least 1)")
		}
	}
	return declared
}

// topicNameProblem applies Kafka's topic name rules (Topic.validate in the
// broker): 1-249 characters of [a-zA-Z0-9._-], not "." or "..".
func topicNameProblem(name string) string {
	switch {
	case name == "":
		return "empty"
	case name == "." || name == "..":
		return `"." and ".." are not allowed`
	case len(name) > 249:
		return "longer than 249 characters"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "use only letters, digits, '.', '_' and '-'"
		}
	}
	return ""
}

// uniqueName checks the name of the i-th stage or sink at path p (kind "stage"
// or "sink"): present, valid inside group and transactional IDs, and
// unique; first maps each name to the index that declared it.
func (v *validator) uniqueName(p, kind, name string, i int, first map[string]int) {
	np := p + ".name"
	switch {
	case name == "" && v.has(np):
		v.report(np, "must not be empty")
	case name == "":
		v.report(np, "required")
	case !stageName.MatchString(name):
		v.report(np, "invalid %s name %s (want 1-100 characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit)", kind, v.q(np, name))
	default:
		if j, dup := first[name]; dup {
			v.report(np, "duplicate %s %s (first declared at line %d)", kind, v.q(np, name), v.at(fmt.Sprintf("%ss[%d].name", kind, j)).Line)
			return
		}
		first[name] = i
	}
}

func (v *validator) stages(declared map[string]bool) {
	first := make(map[string]int)
	for i, s := range v.f.Stages {
		p := fmt.Sprintf("stages[%d]", i)
		v.uniqueName(p, "stage", s.Name, i, first)

		v.endpoint(p+".input", s.Input, declared, "orders.raw")
		v.endpoint(p+".output", s.Output, declared, "orders.clean")
		dp := p + ".dead_letter"
		v.deadLetterTopic(dp, s.DeadLetter.Topic, declared, "orders.dlq")

		in, out, dl := s.Input.Topic, s.Output.Topic, s.DeadLetter.Topic
		if in != "" && in == out {
			op := p + ".output.topic"
			v.report(op, "stage reads and writes topic %s (output must differ from input)", v.q(op, out))
		}
		if dl != "" && dl == in {
			v.report(dp+".topic", "dead letter topic %s is also the stage's input topic", v.q(dp+".topic", dl))
		}
		if dl != "" && dl == out {
			v.report(dp+".topic", "dead letter topic %s is also the stage's output topic", v.q(dp+".topic", dl))
		}

		v.fetchSizes(p, s.FetchMaxBytes, s.MaxPartitionFetchBytes)
		if ip, tt := p+".commit.interval", v.f.Kafka.TransactionTimeout.Duration; tt >= time.Second && s.Commit.Interval.Duration >= tt {
			// The broker aborts a transaction open longer than this.
			v.report(ip, "must be below kafka.transaction_timeout %s (got %s)", v.num("kafka.transaction_timeout", tt.String()), v.num(ip, s.Commit.Interval.String()))
		}

		kp := p + ".key"
		switch {
		case s.Key == "" && v.has(kp):
			v.report(kp, "must be a non-empty field name (or leave key out)")
		case !plainField(s.Key):
			// A CEL expression here would pass, then dead-letter every
			// record for a missing field named like the expression.
			v.report(kp, "%s is not a field name: a stage's key names a top-level field of the output value (for an expression, add a transform step instead: - key: %s)",
				v.q(kp, s.Key), v.name(kp, s.Key))
		case s.Key != "" && (s.Input.Format == "string" || s.Input.Format == "bytes"):
			v.report(kp, "key needs input format json or avro, since the key is a field of the record's value (input format is %s)",
				v.q(p+".input.format", s.Input.Format))
		default:
			v.keyInSchema(p, s)
		}
		v.transform(p, s, declared)
	}
}

// plainField reports whether name reads as a top-level field name rather
// than a path or an expression: no dots, brackets, parentheses, operators,
// quotes or spaces.
func plainField(name string) bool {
	return !strings.ContainsAny(name, ".[](){}+*/%<>=!&|?:,'\" \t")
}

// deadLetterTopic checks the dead_letter mapping at path; example is a
// topic for the hint.
func (v *validator) deadLetterTopic(path, topic string, declared map[string]bool, example string) {
	if v.has(path) {
		v.topicRef(path+".topic", topic, declared)
	} else {
		v.report(path, "required (e.g. dead_letter: { topic: %s })", example)
	}
}

// fetchSizes checks fetch_max_bytes and max_partition_fetch_bytes of the
// stage or sink at path.
func (v *validator) fetchSizes(path string, maxBytes, partitionBytes int32) {
	mp, pp := path+".fetch_max_bytes", path+".max_partition_fetch_bytes"
	s := specOf(stripIndexes(pp))
	lo, hi := Bounds[int32](stripIndexes(pp))
	maxOK := maxBytes >= lo && maxBytes <= hi // reported by checkSpec
	// Every problem at once: a written max_partition_fetch_bytes is
	// checked against its own bounds even when fetch_max_bytes is wrong
	// (a defaulted one follows fetch_max_bytes, and is not reported), and
	// against fetch_max_bytes when that is right.
	written := v.has(pp)
	switch {
	case partitionBytes < lo && (maxOK || written):
		v.report(pp, "must be at least %s bytes (got %s)", s.text(s.min), v.num(pp, strconv.Itoa(int(partitionBytes))))
	case !maxOK && written && partitionBytes > hi:
		v.report(pp, "must be at most %s bytes (got %s)", s.text(s.max), v.num(pp, strconv.Itoa(int(partitionBytes))))
	case maxOK && partitionBytes > maxBytes:
		v.report(pp, "must not exceed fetch_max_bytes %s (got %s)", v.num(mp, strconv.Itoa(int(maxBytes))), v.num(pp, strconv.Itoa(int(partitionBytes))))
	}
}

// endpoint checks input or output at path; example is a topic for hints.
func (v *validator) endpoint(path string, e Endpoint, declared map[string]bool, example string) {
	if !v.has(path) {
		v.report(path, "required (e.g. %s: { topic: %s, format: json })", path[strings.LastIndexByte(path, '.')+1:], example)
		return
	}
	v.topicRef(path+".topic", e.Topic, declared)
	v.avro(path, e)
}

// avro checks the schema and registry fields of the endpoint at path.
func (v *validator) avro(path string, e Endpoint) {
	sp, rp := path+".schema", path+".registry"
	hasSchema, hasReg := v.has(sp), v.has(rp)
	if e.Format != "avro" {
		for _, p := range []string{sp, rp} {
			if v.has(p) && slices.Contains(formats, e.Format) {
				v.report(p, "only for format avro (format is %s)", v.q(path+".format", e.Format))
			}
		}
		return
	}
	output := strings.HasSuffix(path, ".output")
	switch {
	case !hasSchema && !hasReg && output:
		v.report(path, "format avro needs schema: path/to/file.avsc (and registry: { url: ... } for the Confluent wire format)")
	case !hasSchema && !hasReg:
		v.report(path, "format avro needs schema: path/to/file.avsc (raw Avro) or registry: { url: ... } (Confluent wire format)")
	case !hasSchema && output:
		v.report(path, "an avro output with a registry needs schema: path/to/file.avsc, the schema it registers and writes")
	case hasSchema && hasReg && !output:
		v.report(sp, "an input with a registry reads each record with the writer schema named by its ID; set registry.reader_schema to resolve it to your own schema instead")
	}
	if hasSchema {
		v.schemaFile(sp, e.Schema)
	}
	if !hasReg {
		return
	}
	r := e.Registry
	up := rp + ".url"
	switch u, err := url.Parse(r.URL); {
	case !v.has(up):
		v.report(up, "required (e.g. url: ${SCHEMA_REGISTRY_URL})")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		// The URL is not shown: it may hold credentials.
		v.report(up, "invalid registry URL (want http(s)://host[:port][/path])")
	case u.User != nil:
		v.report(up, "credentials in the URL are not allowed (use registry.username and registry.password: ${VAR})")
	}
	if output && v.has(rp+".reader_schema") {
		v.report(rp+".reader_schema", "only for inputs (an output writes with schema)")
	}
	if !output && v.has(rp+".subject") {
		v.report(rp+".subject", "only for outputs (an input finds each record's schema by the ID in its frame)")
	}
	if v.has(rp + ".reader_schema") {
		v.schemaFile(rp+".reader_schema", r.ReaderSchema)
	}
	if v.has(rp+".password") && !v.has(rp+".username") {
		v.report(rp+".password", "needs registry.username")
	}
	v.registrySecurity(rp, r)
}

// schemaFile checks that the Avro schema file at path (relative to the
// topology file) can be read and is an Avro schema that the stage's or
// sink's codec accepts (serde.CheckSchema), so that validate refuses what
// start would.
func (v *validator) schemaFile(path, name string) {
	if name == "" {
		v.report(path, "must not be empty")
		return
	}
	data, err := os.ReadFile(v.f.Resolve(name))
	switch {
	case err != nil:
		v.report(path, "cannot read schema file %s (relative paths start at the topology file's directory)", v.q(path, name))
	case !json.Valid(data):
		v.report(path, "schema file %s is not JSON (want an Avro schema, .avsc)", v.q(path, name))
	default:
		if err := serde.CheckSchema(data); err != nil {
			v.report(path, "schema file %s is not a valid Avro schema: %v", v.q(path, name), err)
			return
		}
		for _, w := range serde.SchemaWarnings(data) {
			v.warn(path, "schema file %s: %s", v.q(path, name), w)
		}
	}
}

// topicRef checks that the topic named at path is declared under topics.
func (v *validator) topicRef(path, name string, declared map[string]bool) {
	switch {
	case name == "" && v.has(path):
		v.report(path, "must not be empty")
	case name == "":
		v.report(path, "required")
	case !declared[name]:
		v.report(path, "topic %s is not declared (add it under topics:)", v.q(path, name))
	}
}
