package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// BrokersEnv names the environment variable that, when set and non-empty,
// replaces kafka.brokers: a comma-separated list of host:port.
const BrokersEnv = "EXACTLY_BROKERS"

// Load reads the topology file at path and parses it with the process
// environment. See Parse.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load topology: %w", err)
	}
	return Parse(path, data, os.LookupEnv)
}

// Parse decodes, expands, defaults and validates a topology file. name is
// used in messages and as File.Path; lookupEnv resolves ${VAR} references
// and EXACTLY_BROKERS (nil means no variable is set).
//
// On failure it returns a nil *File and an Errors holding every problem
// found, sorted by position. Parse does not touch the network and does not
// panic, whatever data holds.
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	d := newDecoder(name, lookupEnv)
	root := d.root(data)
	if root == nil {
		return nil, d.errs.sorted()
	}
	f := &File{Path: name}
	d.decode(root, reflect.ValueOf(f).Elem(), "")
	f.pos = d.pos

	v := &validator{d: d, f: f}
	v.overrideBrokers()
	v.defaults()
	v.validate()
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	v.resolveKafkaFiles()
	f.warnings = f.warnings.sorted()
	return f, nil
}

// validator checks a decoded File. It reports through the decoder so that
// decode and validation problems end up in one list.
type validator struct {
	d            *decoder
	f            *File
	brokersByEnv bool
}

// has reports whether path was written in the file with a non-null value.
func (v *validator) has(path string) bool {
	_, ok := v.d.pos[path]
	return ok && !v.d.null[path]
}

// at returns the position of path, or of its nearest written ancestor: a
// missing field is reported at the mapping that lacks it.
func (v *validator) at(path string) Position {
	for {
		if p, ok := v.d.pos[path]; ok {
			return p
		}
		if path == "" {
			return Position{}
		}
		path = parent(path)
	}
}

// report records a problem at path unless decoding already failed there or
// above: one cause, one message.
func (v *validator) report(path, format string, args ...any) {
	for p := path; ; p = parent(p) {
		if v.d.failed[p] {
			return
		}
		if p == "" {
			break
		}
	}
	v.d.add(v.at(path), path, format, args...)
}

// q quotes the value at path for a message, showing the source text instead
// when the value came from the environment.
func (v *validator) q(path, val string) string {
	if src, ok := v.d.src[path]; ok {
		return shown(src, true)
	}
	return strconv.Quote(truncate(val))
}

// num is like q for numbers and durations, which read better unquoted.
func (v *validator) num(path, val string) string {
	if src, ok := v.d.src[path]; ok {
		return shown(src, true)
	}
	return val
}

// name is like q without quotes, for lists such as cycles.
func (v *validator) name(path, val string) string {
	if src, ok := v.d.src[path]; ok {
		return src
	}
	if val == "" {
		return parent(path)
	}
	return val
}

func (v *validator) overrideBrokers() {
	env, ok := v.d.lookup(BrokersEnv)
	if !ok || strings.TrimSpace(env) == "" {
		return
	}
	var brokers []string
	for _, b := range strings.Split(env, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	v.f.Kafka.Brokers = brokers
	v.brokersByEnv = true
	// The file's brokers are replaced, so their problems (an unset variable,
	// say) no longer matter, and their positions would mislead.
	under := func(p string) bool {
		return p == "kafka.brokers" || strings.HasPrefix(p, "kafka.brokers[")
	}
	errs := v.d.errs[:0]
	for _, e := range v.d.errs {
		if !under(e.Path) {
			errs = append(errs, e)
		}
	}
	v.d.errs = errs
	for _, m := range []map[string]bool{v.d.failed, v.d.null} {
		for p := range m {
			if under(p) {
				delete(m, p)
			}
		}
	}
	for p := range v.d.pos {
		if under(p) {
			delete(v.d.pos, p)
		}
	}
	for p := range v.d.src {
		if under(p) {
			delete(v.d.src, p)
		}
	}
}

func (v *validator) defaults() {
	f := v.f
	if f.Kafka.ClientID == "" {
		f.Kafka.ClientID = DefaultClientID
	}
	if !v.has("kafka.transaction_timeout") {
		f.Kafka.TransactionTimeout.Duration = DefaultTransactionTimeout
	}
	if v.has("kafka.tls") && !v.has("kafka.tls.enabled") {
		f.Kafka.TLS.Enabled = true
	}
	for i := range f.Topics {
		if !v.has(fmt.Sprintf("topics[%d].replication_factor", i)) {
			f.Topics[i].ReplicationFactor = DefaultReplicationFactor
		}
	}
	for i := range f.Stages {
		s, p := &f.Stages[i], fmt.Sprintf("stages[%d]", i)
		if s.Input.Format == "" {
			s.Input.Format = DefaultFormat
		}
		if s.Output.Format == "" {
			s.Output.Format = DefaultFormat
		}
		if !v.has(p + ".commit.interval") {
			s.Commit.Interval.Duration = DefaultCommitInterval
		}
		if !v.has(p + ".commit.max_records") {
			s.Commit.MaxRecords = DefaultCommitMaxRecords
		}
	}
	for i := range f.Sinks {
		s, p := &f.Sinks[i], fmt.Sprintf("sinks[%d]", i)
		if s.Input.Format == "" {
			s.Input.Format = DefaultFormat
		}
		if !v.has(p + ".commit.interval") {
			s.Commit.Interval.Duration = DefaultSinkCommitInterval
		}
		if !v.has(p + ".commit.max_records") {
			s.Commit.MaxRecords = DefaultSinkCommitMaxRecords
		}
		if !v.has(p + ".session_timeout") {
			s.SessionTimeout.Duration = DefaultSinkSessionTimeout
		}
		pg := &s.Postgres
		if pg.Tombstones == "" && !v.has(p+".postgres.tombstones") {
			pg.Tombstones = TombstonesSkip
		}
		if pg.Mode == "" && !v.has(p+".postgres.mode") {
			pg.Mode = ModeInsert
		}
		if pg.PositionsTable == "" && !v.has(p+".postgres.positions_table") {
			if schema, _, ok := strings.Cut(pg.Table, "."); ok {
				pg.PositionsTable = schema + "." + DefaultPositionsTable
			}
		}
		// Columns in file order, so that created tables read like the file.
		pg.ColumnOrder = make([]string, 0, len(pg.Columns))
		for c := range pg.Columns {
			pg.ColumnOrder = append(pg.ColumnOrder, c)
		}
		cp := p + ".postgres.columns."
		slices.SortFunc(pg.ColumnOrder, func(a, b string) int {
			pa, pb := v.d.pos[cp+a], v.d.pos[cp+b]
			if pa.Line != pb.Line {
				return pa.Line - pb.Line
			}
			if pa.Col != pb.Col {
				return pa.Col - pb.Col
			}
			return strings.Compare(a, b)
		})
	}
}

var (
	// stageName keeps stage names safe inside transactional IDs and group
	// names.
	stageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	formats   = []string{"json", "string", "bytes", "avro"}
)

func (v *validator) validate() {
	f := v.f
	switch {
	case !v.has("version"):
		v.report("version", "required (set version: 1)")
	case f.Version != 1:
		v.report("version", "unsupported version %s (want 1)", v.num("version", strconv.Itoa(f.Version)))
	}
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
	if t := k.TransactionTimeout.Duration; t < time.Second {
		p := "kafka.transaction_timeout"
		v.report(p, "must be at least 1s (got %s)", v.num(p, t.String()))
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

		pp := p + ".partitions"
		switch {
		case !v.has(pp):
			v.report(pp, "required (number of partitions, at least 1)")
		case t.Partitions < 1:
			v.report(pp, "must be at least 1 (got %s)", v.num(pp, strconv.Itoa(int(t.Partitions))))
		}
		if rf := t.ReplicationFactor; rf != -1 && rf < 1 {
			rp := p + ".replication_factor"
			v.report(rp, "must be -1 (broker default) or at least 1 (got %s)", v.num(rp, strconv.Itoa(int(rf))))
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

		v.commitBounds(p+".commit", s.Commit)
		if ip, tt := p+".commit.interval", v.f.Kafka.TransactionTimeout.Duration; tt >= time.Second && s.Commit.Interval.Duration >= tt {
			// The broker aborts a transaction open longer than this.
			v.report(ip, "must be below kafka.transaction_timeout %s (got %s)", v.num("kafka.transaction_timeout", tt.String()), v.num(ip, s.Commit.Interval.String()))
		}

		kp := p + ".key"
		switch {
		case s.Key == "" && v.has(kp):
			v.report(kp, "must be a non-empty field name (or leave key out)")
		case s.Key != "" && (s.Input.Format == "string" || s.Input.Format == "bytes"):
			v.report(kp, "key needs input format json or avro, since the key is a field of the record's value (input format is %s)",
				v.q(p+".input.format", s.Input.Format))
		}
		v.transform(p, s, declared)
	}
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

// commitBounds checks the commit mapping at path.
func (v *validator) commitBounds(path string, c Commit) {
	if ip := path + ".interval"; c.Interval.Duration <= 0 {
		v.report(ip, "must be greater than 0 (got %s)", v.num(ip, c.Interval.String()))
	}
	if mp := path + ".max_records"; c.MaxRecords < 1 {
		v.report(mp, "must be at least 1 (got %s)", v.num(mp, strconv.Itoa(c.MaxRecords)))
	}
}

// endpoint checks input or output at path; example is a topic for hints.
func (v *validator) endpoint(path string, e Endpoint, declared map[string]bool, example string) {
	if !v.has(path) {
		v.report(path, "required (e.g. %s: { topic: %s, format: json })", path[strings.LastIndexByte(path, '.')+1:], example)
		return
	}
	v.topicRef(path+".topic", e.Topic, declared)
	fp := path + ".format"
	if !slices.Contains(formats, e.Format) {
		v.report(fp, "unknown format %s (valid: %s)", v.q(fp, e.Format), strings.Join(formats, ", "))
	}
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
// topology file) can be read and is JSON; the serde package checks the rest
// when the stage starts.
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

// cycles reports each loop of stages (A's output is B's input) once, at the
// input topic of its first stage in file order. A stage reading its own
// output is reported by stages instead.
func (v *validator) cycles() {
	adj := v.f.graph()
	for _, comp := range sccs(adj) {
		if len(comp) < 2 {
			continue
		}
		start := comp[0]
		in := make(map[int]bool, len(comp))
		for _, c := range comp {
			in[c] = true
			start = min(start, c)
		}
		loop := shortestLoop(adj, start, in)
		names := make([]string, len(loop))
		onLoop := make(map[int]bool, len(loop))
		for i, s := range loop {
			names[i] = v.name(fmt.Sprintf("stages[%d].name", s), v.f.Stages[s].Name)
			onLoop[s] = true
		}
		msg := "cycle: " + strings.Join(names, " -> ")
		var others []string
		for i := range v.f.Stages {
			if in[i] && !onLoop[i] {
				others = append(others, v.name(fmt.Sprintf("stages[%d].name", i), v.f.Stages[i].Name))
			}
		}
		if len(others) > 0 {
			msg += " (also in this loop: " + strings.Join(others, ", ") + ")"
		}
		v.report(fmt.Sprintf("stages[%d].input.topic", start), "%s", msg)
	}
}

// sccs returns the strongly connected components of adj (Tarjan).
func sccs(adj [][]int) [][]int {
	n := len(adj)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var out [][]int
	next := 0
	var visit func(int)
	visit = func(u int) {
		index[u], low[u] = next, next
		next++
		stack = append(stack, u)
		onStack[u] = true
		for _, w := range adj[u] {
			if index[w] < 0 {
				visit(w)
				low[u] = min(low[u], low[w])
			} else if onStack[w] {
				low[u] = min(low[u], index[w])
			}
		}
		if low[u] == index[u] {
			var comp []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == u {
					break
				}
			}
			out = append(out, comp)
		}
	}
	for i := 0; i < n; i++ {
		if index[i] < 0 {
			visit(i)
		}
	}
	return out
}

// shortestLoop returns start, the stages of a shortest path back to it
// within in, and start again.
func shortestLoop(adj [][]int, start int, in map[int]bool) []int {
	prev := map[int]int{}
	queue := []int{start}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, w := range adj[u] {
			if !in[w] {
				continue
			}
			if w == start {
				loop := []int{start}
				for x := u; x != start; x = prev[x] {
					loop = append(loop, x)
				}
				// loop is start, then the path backwards; reverse the path.
				for i, j := 1, len(loop)-1; i < j; i, j = i+1, j-1 {
					loop[i], loop[j] = loop[j], loop[i]
				}
				return append(loop, start)
			}
			if _, seen := prev[w]; !seen && w != start {
				prev[w] = u
				queue = append(queue, w)
			}
		}
	}
	return []int{start, start}
}

var (
	// identifier is a Postgres identifier as the sink accepts it: it is
	// always quoted in SQL, so case is kept as written.
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	// sinkFormats are the input formats a sink reads.
	sinkFormats = []string{"json", "string", "bytes"}
	sources     = []string{SourceValue, SourceKey, SourceTopic, SourcePartition, SourceOffset, SourceTimestamp}
	tombstones  = []string{TombstonesSkip, TombstonesDelete}
	sinkModes   = []string{ModeInsert, ModeUpsert}
)

func (v *validator) sinks(declared map[string]bool) {
	first := make(map[string]int)
	for i, s := range v.f.Sinks {
		p := fmt.Sprintf("sinks[%d]", i)
		v.uniqueName(p, "sink", s.Name, i, first)

		if fp := p + ".input.format"; s.Input.Format == "avro" {
			// The sink's columns read JSON fields or whole values only.
			v.report(fp, "format avro is not supported by sinks (valid: %s)", strings.Join(sinkFormats, ", "))
			v.topicRef(p+".input.topic", s.Input.Topic, declared)
		} else {
			v.endpoint(p+".input", s.Input, declared, "orders.clean")
		}
		dp := p + ".dead_letter"
		v.deadLetterTopic(dp, s.DeadLetter.Topic, declared, "orders.sink-dlq")
		if dl := s.DeadLetter.Topic; dl != "" && dl == s.Input.Topic {
			v.report(dp+".topic", "dead letter topic %s is also the sink's input topic", v.q(dp+".topic", dl))
		}

		v.commitBounds(p+".commit", s.Commit)
		if sp := p + ".session_timeout"; s.SessionTimeout.Duration < time.Second {
			v.report(sp, "must be at least 1s (got %s)", v.num(sp, s.SessionTimeout.String()))
		}
		v.postgres(p+".postgres", s)
	}
}

func (v *validator) postgres(p string, s Sink) {
	if !v.has(p) {
		v.report(p, "required (e.g. postgres: { dsn: ${PG_DSN}, table: raw.events, event_id: event_id, columns: {event_id: event_id, body: $value} })")
		return
	}
	pg := s.Postgres
	// The DSN is never quoted in a message: it may hold a password even
	// when written literally.
	switch dp := p + ".dsn"; {
	case pg.DSN == "" && v.has(dp):
		v.report(dp, "must not be empty")
	case pg.DSN == "":
		v.report(dp, "required (write it as ${PG_DSN}: it holds credentials)")
	default:
		// What the sink parses at start; reads no network, but may read
		// sslrootcert and the like, as the sink would.
		if _, err := pgxpool.ParseConfig(string(pg.DSN)); err != nil {
			v.report(dp, "not a valid connection string (want postgres://user@host:port/db?sslmode=... or key=value pairs)")
		}
	}
	v.literalDSN(p+".dsn", pg.DSN)
	v.qualified(p+".table", pg.Table, "raw.events")
	if v.has(p+".positions_table") || pg.PositionsTable != "" {
		v.qualified(p+".positions_table", pg.PositionsTable, "raw.stream_positions")
	}
	if pg.PositionsTable != "" && pg.PositionsTable == pg.Table {
		v.report(p+".positions_table", "must differ from table")
	}

	cp := p + ".columns"
	if len(pg.Columns) == 0 {
		v.report(cp, "at least one column is required (e.g. columns: { event_id: event_id, body: $value })")
	}
	for _, c := range pg.ColumnOrder {
		src, path := pg.Columns[c], cp+"."+c
		if !identifier.MatchString(c) {
			v.report(path, "invalid column name %s (want a letter or '_', then letters, digits or '_', at most 63)", strconv.Quote(truncate(c)))
		}
		switch {
		case src == "":
			v.report(path, "must name a field or one of %s", strings.Join(sources, ", "))
		case strings.HasPrefix(src, "$") && !slices.Contains(sources, src):
			v.report(path, "unknown source %s (valid: a field name, %s)", v.q(path, src), strings.Join(sources, ", "))
		case !strings.HasPrefix(src, "$") && s.Input.Format != "json" && slices.Contains(formats, s.Input.Format):
			v.report(path, "field %s needs input format json (input format is %s; use $value or $key)", v.q(path, src), v.q(strings.TrimSuffix(p, ".postgres")+".input.format", s.Input.Format))
		}
	}

	ep := p + ".event_id"
	switch _, ok := pg.Columns[pg.EventID]; {
	case pg.EventID == "" && v.has(ep):
		v.report(ep, "must not be empty")
	case pg.EventID == "":
		v.report(ep, "required (the primary key column, one of columns)")
	case len(pg.Columns) > 0 && !ok:
		v.report(ep, "column %s is not in columns (add it, e.g. %s: %s)", v.q(ep, pg.EventID), pg.EventID, pg.EventID)
	}
	if tp := p + ".tombstones"; !slices.Contains(tombstones, pg.Tombstones) {
		v.report(tp, "unknown tombstone policy %s (valid: %s)", v.q(tp, pg.Tombstones), strings.Join(tombstones, ", "))
	}
	if mp := p + ".mode"; !slices.Contains(sinkModes, pg.Mode) {
		v.report(mp, "unknown mode %s (valid: %s)", v.q(mp, pg.Mode), strings.Join(sinkModes, ", "))
	}
}

// qualified checks a schema-qualified table name at path.
func (v *validator) qualified(path, name, example string) {
	if name == "" {
		if v.has(path) {
			v.report(path, "must not be empty")
		} else {
			v.report(path, "required (schema-qualified, e.g. %s)", example)
		}
		return
	}
	schema, table, ok := strings.Cut(name, ".")
	if !ok || !identifier.MatchString(schema) || !identifier.MatchString(table) {
		v.report(path, "invalid table %s (want schema.table, each a letter or '_' then letters, digits or '_', e.g. %s)", v.q(path, name), example)
	}
}
