package topology

import (
	"fmt"
	"slices"
	"strings"
)

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
		v.defaultReader(p, &s.Commit, &s.SessionTimeout, &s.MetadataMaxAge, StageDefaults)
		v.defaultFetch(p, &s.FetchMaxBytes, &s.MaxPartitionFetchBytes, StageDefaults.FetchMaxBytes)
		if !v.has(p + ".max_buffered_bytes") {
			s.MaxBufferedBytes = DefaultMaxBufferedBytes
		}
	}
	for i := range f.Sinks {
		s, p := &f.Sinks[i], fmt.Sprintf("sinks[%d]", i)
		if s.Input.Format == "" {
			s.Input.Format = DefaultFormat
		}
		v.defaultReader(p, &s.Commit, &s.SessionTimeout, &s.MetadataMaxAge, SinkDefaults)
		v.defaultFetch(p, &s.FetchMaxBytes, &s.MaxPartitionFetchBytes, SinkDefaults.FetchMaxBytes)
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
		if !v.has(p + ".postgres.timeout") {
			pg.Timeout.Duration = DefaultPostgresTimeout
		}
		if pg.Types == "" && !v.has(p+".postgres.types") {
			pg.Types = TypesDeclared
		}
		for c := range pg.Columns {
			if t, ok := v.d.types[p+".postgres.columns."+c]; ok {
				if pg.ColumnTypes == nil {
					pg.ColumnTypes = map[string]string{}
				}
				pg.ColumnTypes[c] = strings.TrimSpace(t)
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

// defaultReader applies the defaults d of the stage or sink at path to its
// commit mapping and group settings, for the fields the file leaves out.
func (v *validator) defaultReader(path string, c *Commit, session, metadata *Duration, d ReaderDefaults) {
	if !v.has(path + ".commit.interval") {
		c.Interval.Duration = d.CommitInterval
	}
	if !v.has(path + ".commit.max_records") {
		c.MaxRecords = d.CommitMaxRecords
	}
	if !v.has(path + ".session_timeout") {
		session.Duration = d.SessionTimeout
	}
	if !v.has(path + ".metadata_max_age") {
		metadata.Duration = DefaultMetadataMaxAge
	}
}

// defaultFetch applies the defaults of the fetch sizes of the stage or
// sink at path (maxBytesDefault: DefaultFetchMaxBytes or
// DefaultSinkFetchMaxBytes), for the fields the file leaves out. A partition's default
// share is no more than the fetch_max_bytes written.
func (v *validator) defaultFetch(path string, maxBytes, partitionBytes *int32, maxBytesDefault int32) {
	if !v.has(path + ".fetch_max_bytes") {
		*maxBytes = maxBytesDefault
	}
	if !v.has(path + ".max_partition_fetch_bytes") {
		*partitionBytes = min(DefaultMaxPartitionFetchBytes, *maxBytes)
	}
}
