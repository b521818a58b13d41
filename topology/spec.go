package topology

import (
	"fmt"
	"math"
	"reflect"
	"sync"
	"time"
	"unsafe"
)

// setting is the one definition of a setting of the topology file: its
// doc, default, bounds and allowed values. Its path and Go type come from
// the yaml tags of File's types (see walk). Validation, the defaults Parse
// and the engine apply, the field reference (reference) and the JSON
// Schema (Schema) all read it.
//
// A spec key is a path ("stages[].commit.interval") or, for a field of a
// type used at several paths, the type and the field ("Endpoint.format");
// a path's own entry overrides its type's.
type setting struct {
	doc string
	// def is the default Parse applies to a field the file leaves out, of
	// the field's Go type (time.Duration for a Duration); a string field
	// written empty takes it too. defText says the default in words when it
	// is not one value (it depends on other settings) or is not applied.
	def     any
	defText string
	// min and max bound a number or a duration; minWhy says where min
	// comes from. positive is min > 0. or is one more value allowed below
	// min, orWhy what it means.
	min, max any
	minWhy   string
	positive bool
	or       any
	orWhy    string
	// apart reports the bounds one at a time ("must be at least",
	// "must be at most") rather than "must be between".
	apart bool
	// enum is the allowed values; what names them in "unknown <what>"
	// (without it, "must be a or b").
	enum []string
	what string
	// unit is "bytes" for sizes, shown with their KiB/MiB/GiB.
	unit     string
	required bool
	// own says validation checks the bounds by hand, with a message of
	// its own (they depend on other settings, or say more).
	own bool
	// derived says def is what the default is made from, not the value:
	// Parse derives the value by hand (defaults), and the JSON Schema
	// shows no default.
	derived bool
}

// Limits of the Kafka client that stages and sinks use (franz-go), which
// validate applies so that a file it accepts also builds a client.
const (
	// heartbeatInterval is the consumer group heartbeat interval the
	// clients keep (franz-go's default); the client refuses a session
	// timeout below it.
	heartbeatInterval = 3 * time.Second
	// maxWireTimeout is the largest timeout the Kafka protocol carries
	// (an int32 of milliseconds).
	maxWireTimeout = time.Duration(math.MaxInt32) * time.Millisecond
	kib, mib, gib  = 1 << 10, 1 << 20, 1 << 30
)

var formats = []string{"json", "string", "bytes", "avro"}

// spec is every setting's definition, keyed as setting says.
var spec = map[string]setting{
	"version": {doc: "The file format's version.", required: true, min: 1, max: 1, own: true},
	"kafka":   {doc: "How every stage and sink reaches the cluster.", required: true},
	"kafka.brokers": {doc: "Seed broker addresses, host:port. `EXACTLY_BROKERS` (comma-separated) replaces them when set and non-empty.",
		required: true},
	"kafka.client_id": {doc: "Sent with every request.", def: "exactly"},
	"kafka.transaction_timeout": {doc: "The producer's transaction.timeout.ms: how long the coordinator waits before aborting the open transaction of a dead instance. At most the broker's transaction.max.timeout.ms (15m by default).",
		def: 30 * time.Second, min: time.Second, max: maxWireTimeout, apart: true},
	"kafka.tls":                      {doc: "TLS to the brokers, for every client; leave out for plaintext."},
	"kafka.tls.enabled":              {doc: "Turns TLS on.", defText: "true once `tls` is written"},
	"kafka.tls.ca_file":              {doc: "PEM file of the CAs that sign the brokers' certificates, relative to the topology file.", defText: "the system's roots"},
	"kafka.tls.cert_file":            {doc: "PEM client certificate for mutual TLS; with `key_file`."},
	"kafka.tls.key_file":             {doc: "PEM key of `cert_file`."},
	"kafka.tls.server_name":          {doc: "The name the brokers' certificates must carry.", defText: "the host dialed"},
	"kafka.tls.insecure_skip_verify": {doc: "Accepts any certificate: tests only (warned about).", def: false},
	"kafka.sasl":                     {doc: "SASL authentication to the brokers; each mechanism takes only its own fields."},
	"kafka.sasl.mechanism": {doc: "The SASL mechanism (any case).", required: true,
		enum: []string{mechanismPlain, mechanismScramSHA256, mechanismScramSHA512, mechanismOAuthBearer, mechanismAWSMSKIAM}, what: "SASL mechanism"},
	"kafka.sasl.username":              {doc: "PLAIN and SCRAM: the user."},
	"kafka.sasl.password":              {doc: "PLAIN and SCRAM: the password, written as `${VAR}`; or `password_file`."},
	"kafka.sasl.password_file":         {doc: "A file holding the password (one trailing newline dropped), read when a command connects."},
	"kafka.sasl.token":                 {doc: "OAUTHBEARER: the bearer token, written as `${VAR}`; or `token_file`."},
	"kafka.sasl.token_file":            {doc: "OAUTHBEARER: a file holding the token, read again for every authentication (KIP-368)."},
	"kafka.sasl.extensions":            {doc: "OAUTHBEARER: SASL extensions (KIP-342), name to value."},
	"kafka.sasl.aws":                   {doc: "AWS_MSK_IAM: credentials.", defText: "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN"},
	"kafka.sasl.aws.access_key_id":     {doc: "The AWS access key ID.", required: true},
	"kafka.sasl.aws.secret_access_key": {doc: "The AWS secret access key, written as `${VAR}`.", required: true},
	"kafka.sasl.aws.session_token":     {doc: "Required with temporary credentials (an assumed role, STS)."},
	"kafka.sasl.aws.user_agent":        {doc: "Replaces franz-go's user agent, for IAM policies on aws:UserAgent."},

	"topics":                      {doc: "The topics the topology reads and writes; `exactly topics create` makes them."},
	"topics[].name":               {doc: "1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`; unique.", required: true},
	"topics[].partitions":         {doc: "How many instances of a stage reading the topic can share the work.", required: true, min: 1},
	"topics[].replication_factor": {doc: "Replicas of each partition.", def: -1, min: 1, or: -1, orWhy: "broker default"},
	"topics[].config":             {doc: "Topic configs for CreateTopics, such as `retention.ms` or `cleanup.policy`."},

	"stages":                      {doc: "Stages: each reads one topic, transforms each record and writes another, in one Kafka transaction per batch."},
	"stages[].name":               {doc: "1-100 characters of `[A-Za-z0-9._-]`, starting with a letter or digit; part of the transactional IDs and group name.", required: true},
	"stages[].input":              {doc: "The topic the stage reads.", required: true},
	"stages[].output":             {doc: "The topic the stage writes.", required: true},
	"stages[].dead_letter":        {doc: "Where records that fail to decode, transform or encode go, in the stage's transaction.", required: true},
	"stages[].key":                {doc: "A top-level field name of the output value whose value becomes the output key (input format json or avro). For an expression, use a `key` step."},
	"stages[].commit":             {doc: "Bounds one transaction: it commits when `interval` passed or `max_records` input records were polled into it."},
	"stages[].commit.interval":    {doc: "How long a transaction stays open at most; below `kafka.transaction_timeout`.", def: 100 * time.Millisecond, positive: true},
	"stages[].commit.max_records": {doc: "Input records per transaction at most.", def: 10000, min: 1},
	"stages[].transform":          {doc: "The steps each record goes through, in order; each step has exactly one operation. Expressions are CEL."},
	"stages[].output_timestamp": {doc: "The timestamp of the outputs and window results: `input` keeps the input's (event time, as Kafka Streams does), `write` is the time of writing. Retention counts from it.",
		def: OutputTimestampInput, enum: []string{OutputTimestampInput, OutputTimestampWrite}, what: "output timestamp"},
	"stages[].upstream_idle_timeout": {doc: "How long an upstream partition that sends nothing holds back the stream time of a dedupe or aggregate step, a minimum over upstream partitions (see stateful.md); `0s` waits for it for ever.",
		def: 30 * time.Second, min: time.Duration(0), max: 24 * time.Hour},
	"stages[].session_timeout": {doc: "The consumer group session timeout: a killed instance holds its partitions until it passes.",
		def: 45 * time.Second, min: heartbeatInterval, minWhy: "the client's heartbeat interval", max: maxWireTimeout, apart: true},
	// 30s, not franz-go's 5m: each refresh is one small Metadata request.
	"stages[].metadata_max_age": {doc: "How often topic metadata is refreshed: a partition added to the input is read within it.",
		def: 30 * time.Second, min: time.Second, max: time.Hour},
	// 2 MiB, not the 50 MiB of franz-go and the Java consumer, which bound
	// nothing below 50 partitions of 1 MiB: a fetch is held while it is
	// read and the next one arrives, and Go's collector lets the heap grow
	// to twice what is held. 2 MiB still carries two thousand 1 KiB records
	// a round trip. 100 MiB is the largest response the client reads
	// (franz-go's BrokerMaxReadBytes).
	"stages[].fetch_max_bytes": {doc: "The most one fetch from one broker returns (fetch.max.bytes); bounds the input's memory.",
		def: 2 * mib, min: kib, max: 100 * mib, unit: "bytes"},
	"stages[].max_partition_fetch_bytes": {doc: "The most one fetch returns of one partition (max.partition.fetch.bytes); at most `fetch_max_bytes`.",
		def: mib, min: kib, max: 100 * mib, unit: "bytes", defText: "1048576 (1 MiB), or `fetch_max_bytes` if less", own: true},
	// 4 MiB, not franz-go's no bound: what the producer held grew with
	// every burst the broker was slower than the stage; 2 MiB cost
	// throughput in the bench. At least 1 MiB, more than the largest batch
	// the producer makes (1000012 bytes), so that it refuses no record.
	"stages[].max_buffered_bytes": {doc: "The most the producer holds of records not yet acknowledged (buffer.memory).",
		def: 4 * mib, min: mib, max: gib, unit: "bytes"},

	"stages[].transform[].name":                             {doc: "Labels the step in dead letters.", defText: "`transform[i] <op>`"},
	"stages[].transform[].filter":                           {doc: "Drops the record when this bool expression is false."},
	"stages[].transform[].set":                              {doc: "Assigns fields: field path (`a.b.c`) to expression; every expression sees the value before the step."},
	"stages[].transform[].drop":                             {doc: "Removes fields (paths)."},
	"stages[].transform[].rename":                           {doc: "Moves fields: old path to new path."},
	"stages[].transform[].key":                              {doc: "An expression whose result becomes the output key."},
	"stages[].transform[].route":                            {doc: "Picks the output topic: the first rule whose `when` is true, or the rule without `when`; no match keeps the stage's output."},
	"stages[].transform[].route[].when":                     {doc: "A bool expression; empty matches every record."},
	"stages[].transform[].route[].topic":                    {doc: "A declared topic.", required: true},
	"stages[].transform[].explode":                          {doc: "A list expression: one record per element, the element as its value."},
	"stages[].transform[].headers":                          {doc: "Sets output headers: name to string expression."},
	"stages[].transform[].func":                             {doc: "A Go transform registered with transform.Register."},
	"stages[].transform[].dedupe":                           {doc: "Drops a record whose ID was seen within `retention`; stateful, the stage's first step."},
	"stages[].transform[].dedupe.id":                        {doc: "An expression for the record's event ID.", required: true},
	"stages[].transform[].dedupe.retention":                 {doc: "How far, in event time, a copy may be from the first sighting of its ID to be dropped, and how long past it, in stream time, the ID is kept: numbers with units d, h, m, s (`7d`, `1d12h`), at most 100 years.", required: true},
	"stages[].transform[].aggregate":                        {doc: "Windowed aggregations over event time per record key; stateful, the stage's last step."},
	"stages[].transform[].aggregate.window":                 {doc: "`tumbling: <size>`, `hopping: { size, advance }` or `session: { gap }`.", required: true},
	"stages[].transform[].aggregate.window.tumbling":        {doc: "Windows this long, end to end; whole milliseconds."},
	"stages[].transform[].aggregate.window.hopping":         {doc: "Windows `size` long, starting every `advance`."},
	"stages[].transform[].aggregate.window.hopping.size":    {doc: "The window length; whole milliseconds.", required: true},
	"stages[].transform[].aggregate.window.hopping.advance": {doc: "How far apart windows start; at most `size`.", required: true},
	"stages[].transform[].aggregate.window.session":         {doc: "Session windows: a key's records no more than `gap` apart in event time, merged as records bridge them."},
	"stages[].transform[].aggregate.window.session.gap":     {doc: "The longest lull within a session; whole milliseconds.", required: true},
	"stages[].transform[].aggregate.time":                   {doc: "An expression for the event time (Unix ms, or RFC 3339), or `$timestamp`: the record timestamp.", defText: "`$timestamp`"},
	"stages[].transform[].aggregate.grace":                  {doc: "How long, in stream time, a window still takes records after its end; whole milliseconds.", defText: "0s"},
	"stages[].transform[].aggregate.group_by":               {doc: "`key`: the record key, or an expression the record key must equal.", defText: "`key`"},
	"stages[].transform[].aggregate.aggregations":           {doc: "The results by name: `count`, or one of sum, min, max, avg, first, last with an expression.", required: true},
	"Aggregation.sum":                                       {doc: "Sum of the expression."},
	"Aggregation.min":                                       {doc: "Least value of the expression."},
	"Aggregation.max":                                       {doc: "Greatest value of the expression."},
	"Aggregation.avg":                                       {doc: "Mean of the expression."},
	"Aggregation.first":                                     {doc: "The expression's value for the window's first record."},
	"Aggregation.last":                                      {doc: "The expression's value for the window's last record."},
	"stages[].transform[].aggregate.emit": {doc: "`final`: one result per window once it closes; `update`: a result on every change.",
		defText: "`final`", enum: []string{"final", "update"}},
	"stages[].transform[].stateful":       {doc: "A Go transform registered with transform.RegisterStateful, with a key-value store; a function name or a mapping."},
	"stages[].transform[].stateful.func":  {doc: "The Go transform's name.", required: true},
	"stages[].transform[].stateful.store": {doc: "The store's name, part of its changelog topic's.", defText: "`func`"},
	"stages[].transform[].join":           {doc: "Looks a key up in a table topic as of the record's timestamp and sets a field to the table's value; stateful (see joins.md)."},
	"stages[].transform[].join.table":     {doc: "The table: a compacted topic keyed like the lookup key, with the input's partition count and keying (co_partitioned).", required: true},
	"stages[].transform[].join.key":       {doc: "An expression for the lookup key: a string as its text, another value as its JSON text.", required: true},
	"stages[].transform[].join.as":        {doc: "The field of the value (dotted for a nested one) that gets the table's value.", required: true},
	"stages[].transform[].join.missing": {doc: "A key the table does not hold at the record's time: `drop` the record, keep it with `null`, or make it a `dead_letter` (reason transform).",
		defText: "`drop`", enum: []string{JoinDrop, JoinNull, JoinDeadLetter}, what: "missing rule"},
	"stages[].transform[].join.mode": {doc: "`co_partitioned`: input partition p looks up table partition p (checked at start). `global`: every instance holds every table partition, whatever the keying.",
		defText: "`co_partitioned`", enum: []string{JoinCoPartitioned, JoinGlobal}, what: "join mode"},
	"stages[].transform[].join.history_retention": {doc: "How far behind the table's newest timestamp the versions of a key are kept for lookups as of an earlier time: numbers with units d, h, m, s (`7d`).", required: true},

	"Endpoint.topic":                {doc: "A declared topic.", required: true},
	"Endpoint.format":               {doc: "How record values are encoded.", def: "json", enum: formats, what: "format"},
	"Endpoint.registry":             {doc: "A Confluent-compatible schema registry: values in its wire format (format avro)."},
	"Registry.url":                  {doc: "http(s)://host[:port][/path], no credentials in it.", required: true},
	"Registry.username":             {doc: "HTTP basic auth user."},
	"Registry.password":             {doc: "HTTP basic auth password, written as `${VAR}`; or `password_file`."},
	"Registry.password_file":        {doc: "A file holding the password."},
	"Registry.ca_file":              {doc: "https: PEM CAs the registry's certificate chains to.", defText: "the system's roots"},
	"Registry.insecure_skip_verify": {doc: "https: accepts any certificate; tests only (warned about).", def: false},
	"DeadLetter.topic":              {doc: "A declared topic.", required: true},

	// An input and an output share Endpoint and Registry, but schema,
	// subject and reader_schema mean something else on each, so each path
	// has its own entry.
	"stages[].input.schema":                  {doc: inputSchemaDoc},
	"sinks[].input.schema":                   {doc: inputSchemaDoc},
	"stages[].output.schema":                 {doc: "An Avro schema file (.avsc), relative to the topology file: the schema of the values written, and the one registered with a registry."},
	"stages[].input.registry.subject":        {doc: inputSubjectDoc},
	"sinks[].input.registry.subject":         {doc: inputSubjectDoc},
	"stages[].output.registry.subject":       {doc: "Where the schema is registered.", defText: "`<topic>-value`"},
	"stages[].input.registry.reader_schema":  {doc: inputReaderSchemaDoc},
	"sinks[].input.registry.reader_schema":   {doc: inputReaderSchemaDoc},
	"stages[].output.registry.reader_schema": {doc: "Not for an output, which writes with `schema`: an input's setting, refused here."},

	"sinks":                     {doc: "Sinks: each reads one topic and writes rows of a Postgres table, with its stream positions in the same transaction."},
	"sinks[].name":              {doc: "As a stage's name; the sink consumes in group `exactly-sink-<name>`.", required: true},
	"sinks[].input":             {doc: "The topic the sink reads.", required: true},
	"sinks[].dead_letter":       {doc: "Where rejected records go: a `table` (exactly once) or a `topic` (at least once).", required: true},
	"sinks[].dead_letter.topic": {doc: "A declared topic; dead letters are produced before the database commit."},
	"sinks[].dead_letter.table": {doc: "A schema-qualified table of the sink's database, written in the batch's transaction."},
	"sinks[].postgres":          {doc: "Where the sink writes.", required: true},
	"sinks[].postgres.dsn":      {doc: "libpq connection string or URL, written as `${VAR}`; never shown in messages.", required: true},
	"sinks[].postgres.table":    {doc: "The target table, `schema.table`.", required: true},
	"sinks[].postgres.event_id": {doc: "The primary key column, one of `columns`.", required: true},
	"sinks[].postgres.columns": {doc: "Column to source: a top-level field, or `$value`, `$key`, `$topic`, `$partition`, `$offset`, `$timestamp`; or `{ field, type }` with the Postgres type a created column gets.",
		required: true},
	"sinks[].postgres.types": {doc: "Where created columns' types come from: `declared` (a column's type, else text) or `from_schema` (avro input: the field's Avro type).",
		def: TypesDeclared, enum: []string{TypesDeclared, TypesFromSchema}, what: "types"},
	"sinks[].postgres.auto_columns": {doc: "With `from_schema`: every unmapped top-level field is a column; new fields add columns.", def: false},
	"sinks[].postgres.positions_table": {doc: "Holds (topic, partition, next_offset), `schema.table`.",
		def: "exactly_positions", derived: true, defText: "`<schema of table>.exactly_positions`"},
	"sinks[].postgres.tombstones": {doc: "What a null value does: `skip`, or `delete` the row whose event ID is the key.",
		def: TombstonesSkip, enum: []string{TombstonesSkip, TombstonesDelete}, what: "tombstone policy"},
	"sinks[].postgres.mode": {doc: "`insert` (ON CONFLICT DO NOTHING) or `upsert` (overwrite).",
		def: ModeInsert, enum: []string{ModeInsert, ModeUpsert}, what: "mode"},
	"sinks[].postgres.version": {doc: "Mode upsert: a column; a record replaces the stored row only if its version is greater."},
	"sinks[].postgres.envelope": {doc: "`none`: the value is the row; `debezium`: change events (needs mode upsert).",
		defText: "`none`", enum: []string{EnvelopeNone, EnvelopeDebezium}, what: "envelope"},
	"sinks[].postgres.unavailable_value": {doc: "The text a change event holds for a value it did not capture (Debezium's `unavailable.value.placeholder`): the column keeps its stored value.",
		def: "__debezium_unavailable_value"},
	"sinks[].postgres.binary_handling": {doc: "How a change event writes bytes where no schema types them (Debezium's `binary.handling.mode`): a string into a `bytea` column is decoded by it.",
		defText: "`bytes` (base64 in JSON) with envelope debezium; else none", enum: []string{BinaryBytes, BinaryBase64, BinaryBase64URLSafe, BinaryHex}, what: "binary handling mode"},
	"sinks[].postgres.decimal_handling": {doc: "How a change event writes a decimal where no schema types it (Debezium's `decimal.handling.mode`): `precise` text is refused (its scale is in the schema), `string` is parsed exactly, `double` must be a JSON number.",
		defText: "`precise` with envelope debezium; else none", enum: []string{DecimalPrecise, DecimalString, DecimalDouble}, what: "decimal handling mode"},
	"sinks[].postgres.interval_handling": {doc: "How a change event writes an interval where no schema types it (Debezium's `interval.handling.mode`): `numeric` is microseconds, `string` ISO 8601.",
		defText: "`numeric` with envelope debezium; else none", enum: []string{IntervalNumeric, IntervalString}, what: "interval handling mode"},
	"sinks[].postgres.time_precision": {doc: "How a change event writes a date, time or timestamp where no schema types it (Debezium's `time.precision.mode`): a number is read in the mode's unit, by the column's precision.",
		defText: "`adaptive` with envelope debezium; else none", enum: []string{TimeAdaptive, TimeAdaptiveMicroseconds, TimeConnect, TimeISOString}, what: "time precision mode"},
	"sinks[].postgres.timeout": {doc: "Bounds one attempt at a call to PostgreSQL (a batch's transaction); then it is retried with backoff.",
		def: time.Minute, min: time.Second, max: time.Hour},
	"sinks[].commit":          {doc: "Bounds one batch, held in memory until it commits."},
	"sinks[].commit.interval": {doc: "How long a batch stays open at most.", def: 200 * time.Millisecond, positive: true},
	// A batch is held in memory until it commits (to retry it whole):
	// 10000 is about 10 MiB of 1 KiB records.
	"sinks[].commit.max_records": {doc: "Records per batch at most.", def: 10000, min: 1},
	"sinks[].session_timeout": {doc: "The consumer group session timeout; the broker bounds it too (group.min.session.timeout.ms, 6s).",
		def: 45 * time.Second, min: heartbeatInterval, minWhy: "the client's heartbeat interval", max: maxWireTimeout, apart: true},
	"sinks[].metadata_max_age": {doc: "As a stage's.", def: 30 * time.Second, min: time.Second, max: time.Hour},
	// 4 MiB: while a sink writes a batch, its one fetch is all that is
	// read ahead of the next; a smaller one leaves more round trips between
	// batches.
	"sinks[].fetch_max_bytes": {doc: "As a stage's; a sink's batch, not its fetch, is most of its memory.",
		def: 4 * mib, min: kib, max: 100 * mib, unit: "bytes"},
	"sinks[].max_partition_fetch_bytes": {doc: "As a stage's.",
		def: mib, min: kib, max: 100 * mib, unit: "bytes", defText: "1048576 (1 MiB), or `fetch_max_bytes` if less", own: true},
}

// The docs of schema, subject and reader_schema on an input.
const (
	inputSchemaDoc       = "An Avro schema file (.avsc), relative to the topology file, for raw Avro; with a registry, use `registry.reader_schema` instead."
	inputSubjectDoc      = "Not for an input, which finds each record's schema by the ID in its frame: an output's setting, refused here."
	inputReaderSchemaDoc = "An .avsc every record's writer schema is resolved to."
)

// typeKey is the spec key of field name of struct type t.
func typeKey(t reflect.Type, name string) string { return t.Name() + "." + name }

// settingAt returns the definition of the setting at pattern (spec
// notation) whose Go field is name of parent type t: the path's own entry
// over its type's.
func settingAt(pattern string, t reflect.Type, name string) (setting, bool) {
	s, okPath := spec[pattern]
	ts, okType := spec[typeKey(t, name)]
	if !okPath {
		return ts, okType
	}
	if okType {
		s = mergeSetting(ts, s)
	}
	return s, true
}

// mergeSetting returns base with what over sets.
func mergeSetting(base, over setting) setting {
	b, o := reflect.ValueOf(&base).Elem(), reflect.ValueOf(&over).Elem()
	for i := range o.NumField() {
		if !o.Field(i).IsZero() {
			// setting's fields are unexported, so reflect refuses Set on
			// them as they are; the addresses are our own two locals.
			dst := reflect.NewAt(b.Field(i).Type(), unsafe.Pointer(b.Field(i).UnsafeAddr())).Elem()
			src := reflect.NewAt(o.Field(i).Type(), unsafe.Pointer(o.Field(i).UnsafeAddr())).Elem()
			dst.Set(src)
		}
	}
	return base
}

// specOf returns the definition of the setting at pattern, which must be
// one (a programming error otherwise).
func specOf(pattern string) setting {
	for _, n := range settings() {
		if n.path == pattern {
			return n.setting
		}
	}
	panic(fmt.Sprintf("topology: no setting %q", pattern))
}

// specNode is a setting with its place and Go type.
type specNode struct {
	node
	setting
}

// settings returns every setting of the file with its definition, in the
// order of File's fields.
var settings = sync.OnceValue(func() []specNode {
	out := make([]specNode, 0, len(settingNodes))
	for _, n := range settingNodes {
		s, _ := settingAt(n.path, n.parent, n.name)
		out = append(out, specNode{n, s})
	}
	return out
})
