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

// defaults applies the spec's defaults (applyDefaults), then those that
// depend on other settings, and normalizes what may be written in any case.
func (v *validator) defaults() {
	f := v.f
	v.applyDefaults()
	if v.has("kafka.tls") && !v.has("kafka.tls.enabled") {
		f.Kafka.TLS.Enabled = true
	}
	if s := &f.Kafka.SASL; slices.Contains(specOf("kafka.sasl.mechanism").enum, strings.ToUpper(s.Mechanism)) {
		s.Mechanism = strings.ToUpper(s.Mechanism)
	}
	for i := range f.Stages {
		s, p := &f.Stages[i], fmt.Sprintf("stages[%d]", i)
		v.capPartitionFetch(p, s.FetchMaxBytes, &s.MaxPartitionFetchBytes)
	}
	for i := range f.Sinks {
		s, p := &f.Sinks[i], fmt.Sprintf("sinks[%d]", i)
		v.capPartitionFetch(p, s.FetchMaxBytes, &s.MaxPartitionFetchBytes)
		pg := &s.Postgres
		if pg.PositionsTable == "" && !v.has(p+".postgres.positions_table") {
			if schema, _, ok := strings.Cut(pg.Table, "."); ok {
				pg.PositionsTable = schema + "." + Default[string]("sinks[].postgres.positions_table")
			}
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

// capPartitionFetch lowers the default max_partition_fetch_bytes of the
// stage or sink at path to its fetch_max_bytes: a partition's default
// share is no more than the whole fetch.
func (v *validator) capPartitionFetch(path string, maxBytes int32, partitionBytes *int32) {
	if !v.has(path + ".max_partition_fetch_bytes") {
		*partitionBytes = min(*partitionBytes, maxBytes)
	}
}
