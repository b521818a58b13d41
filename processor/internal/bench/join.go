//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The join case: orders (1 KiB JSON, keyed by customer ID) joined with a
// compacted customers table topic of the same partition count and key,
// as of each order's timestamp, each order written with its customer's
// value added: exactly's join step, and Kafka Streams' KStream–KTable join
// over a versioned store (exactly_once_v2 both).
const (
	caseEOSJoin  = "exactly EOS join"
	caseKSJoin   = "Kafka Streams EOSv2 join, defaults"
	caseKSJoinM  = "Kafka Streams EOSv2 join, matched"
	joinCustomer = 10_000 // customers in the table
	// joinHistory is the history retention of both systems' versioned
	// tables, and the table topic's min.compaction.lag.ms.
	joinHistory = time.Hour
)

// joinInput is the join case's orders and customers topics.
type joinInput struct {
	orders, customers string
	total             int64 // orders
}

func customerID(i int) string { return fmt.Sprintf("c-%d", i%joinCustomer) }

// customerTier is customer c's tier, which each output must carry.
func customerTier(c int) string { return [...]string{"gold", "silver", "std"}[c%3] }

// orderValue is order i: 1 KiB of JSON whose customer_id is also its key.
func orderValue(i int) []byte {
	head := fmt.Appendf(nil, `{"event_id":"o-%09d","amount":%d,"customer_id":%q,"pad":"`, i, i%1000, customerID(i))
	return padded(head, i)
}

// fillJoin writes the customers, then the orders, so that every order's
// timestamp is after its customer's: a lookup as of the order's time
// finds the customer.
func (r *runner) fillJoin(ctx context.Context) (*joinInput, error) {
	lag := fmt.Sprint(joinHistory.Milliseconds())
	customers, err := r.k.topicWith(ctx, r.k.name("join_customers"), r.cfg.partitions,
		map[string]*string{"cleanup.policy": kptr("compact"), "min.compaction.lag.ms": &lag})
	if err != nil {
		return nil, err
	}
	orders, err := r.k.topic(ctx, "join_orders", 0)
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		firstErr error
	)
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	}
	logf("filling %s with %d customers, then %s with %d orders", customers, joinCustomer, orders, r.cfg.records)
	for c := range joinCustomer {
		id := customerID(c)
		v := fmt.Appendf(nil, `{"id":%q,"name":"customer %d","tier":%q,"since":"2020-01-01"}`, id, c, customerTier(c))
		r.k.cl.Produce(ctx, &kgo.Record{Topic: customers, Key: []byte(id), Value: v}, done)
	}
	if err := r.k.cl.Flush(ctx); err != nil {
		return nil, err
	}
	// Orders are stamped after every customer, even with a clock step.
	time.Sleep(10 * time.Millisecond)
	for i := range r.cfg.records {
		r.k.cl.Produce(ctx, &kgo.Record{Topic: orders, Key: []byte(customerID(i)), Value: orderValue(i)}, done)
	}
	if err := r.k.cl.Flush(ctx); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, fmt.Errorf("produce the join input: %w", firstErr)
	}
	total, err := r.k.endSum(ctx, orders)
	if err != nil {
		return nil, err
	}
	if total != int64(r.cfg.records) {
		return nil, fmt.Errorf("%s holds %d records, want %d", orders, total, r.cfg.records)
	}
	return &joinInput{orders: orders, customers: customers, total: total}, nil
}

// join runs one round of the join case: exactly, then Kafka Streams with
// its defaults and with the matched settings.
func (r *runner) join(ctx context.Context, round int) error {
	if r.joinIn == nil {
		in, err := r.fillJoin(ctx)
		if err != nil {
			return err
		}
		r.joinIn = in
	}
	return r.statefulRound(ctx, round, r.exactlyJoin, r.ksJoin, caseKSJoin, caseKSJoinM)
}

func (r *runner) exactlyJoin(ctx context.Context, round int) {
	in := r.joinIn
	res := caseResult{Name: caseEOSJoin, Group: "join", Records: in.total,
		Note: fmt.Sprintf("join step, co-partitioned, %d customers, history_retention %s, as of each order's timestamp; Pebble store read from the table topic", joinCustomer, shortDur(joinHistory))}
	defer func() { r.rep.add(res) }()
	logf("%s (round %d)", caseEOSJoin, round+1)
	name := fmt.Sprintf("eos_join_r%d", round)
	stage := r.k.name(name)
	out, err := r.k.topic(ctx, name+"_out", 0)
	var dlq, path string
	if err == nil {
		dlq, err = r.k.topic(ctx, name+"_dlq", 1)
	}
	if err == nil {
		err = r.k.awaitTopics(ctx, out, dlq, in.customers)
	}
	if err == nil {
		steps := fmt.Sprintf(`    transform:
      - join:
          table: %s
          key: value.customer_id
          as: customer
          history_retention: %s
`, in.customers, shortDur(joinHistory))
		path, err = r.writeStageTopology(name, stage, in.orders, out, dlq, "", steps)
	}
	if err != nil {
		res.Error = err.Error()
		return
	}
	r.exactlyStateful(ctx, &res, name, stage, path, out, r.joinRun())
}

// ksJoin runs the Kafka Streams peer's "join" mode over the join input
// (see Peer.java), with its defaults or with settings.
func (r *runner) ksJoin(ctx context.Context, label string, round int, settings []ksSetting) {
	in := r.joinIn
	res := caseResult{Name: label, Group: "kstreams", Records: in.total,
		Note: "heap -Xms/-Xmx" + r.cfg.ksHeap + ", 1 stream thread; KStream-KTable join, the table in Stores.persistentVersionedKeyValueStore (history " +
			shortDur(joinHistory) + "), RocksDB + changelog; " +
			ksNote(settings, "Kafka Streams' client defaults")}
	defer func() { r.rep.add(res) }()
	logf("%s (round %d)", label, round+1)
	mode := fmt.Sprintf("join:%s:%d", in.customers, joinHistory.Milliseconds())
	r.ksStateful(ctx, &res, ksRunName("join", round, settings), mode, settings, r.joinRun())
}

// joinRun is the join case's input and output check.
func (r *runner) joinRun() statefulRun {
	return statefulRun{input: r.joinIn.orders, total: r.joinIn.total, check: r.checkJoined}
}

// joinedOut is one output record of either system: the order with its
// customer in "customer".
type joinedOut struct {
	EventID    string `json:"event_id"`
	CustomerID string `json:"customer_id"`
	Customer   *struct {
		ID   string `json:"id"`
		Tier string `json:"tier"`
	} `json:"customer"`
}

// checkJoined reads topic read_committed and sets res.Error unless it
// holds every order once, each with its own customer (id and tier): a run
// that is fast but wrong does not count.
func (r *runner) checkJoined(ctx context.Context, res *caseResult, topic string) {
	want := int(r.joinIn.total)
	seen := make(map[string]bool, want)
	var dups, bad, wrong int
	err := r.readAll(ctx, topic, want, func(rec *kgo.Record) {
		var o joinedOut
		if err := json.Unmarshal(rec.Value, &o); err != nil || o.EventID == "" {
			bad++
			return
		}
		if seen[o.EventID] {
			dups++
		}
		seen[o.EventID] = true
		var i, c int
		_, ierr := fmt.Sscanf(o.EventID, "o-%d", &i)
		_, cerr := fmt.Sscanf(o.CustomerID, "c-%d", &c)
		if ierr != nil || cerr != nil || o.CustomerID != customerID(i) || o.Customer == nil ||
			o.Customer.ID != o.CustomerID || o.Customer.Tier != customerTier(c) {
			wrong++
		}
	})
	if err != nil {
		res.Error = "check results: " + err.Error()
		return
	}
	var problems []string
	if missing := want - len(seen); missing > 0 {
		problems = append(problems, fmt.Sprintf("%d orders missing", missing))
	}
	if dups+bad+wrong > 0 {
		problems = append(problems, fmt.Sprintf("%d written more than once, %d unreadable, %d without their customer", dups, bad, wrong))
	}
	if len(problems) > 0 {
		res.Error = "wrong results: " + strings.Join(problems, "; ")
		return
	}
	res.Note += fmt.Sprintf("; checked: %d orders, each once, each with its customer's id and tier", len(seen))
}

// readAll calls fn with every committed record of topic, read_committed:
// it polls until it has want records, then until a poll of a second
// brings nothing more, to see any extra ones.
func (r *runner) readAll(ctx context.Context, topic string, want int, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(r.cfg.brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(60 * time.Second)
	seen, extra := 0, false
	for {
		wait := 5 * time.Second
		if extra {
			wait = time.Second
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		before := seen
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachRecord(func(rec *kgo.Record) {
			seen++
			fn(rec)
		})
		switch {
		case extra && seen == before:
			return nil
		case seen >= want:
			extra = true
		case time.Now().After(deadline):
			return nil // the check reports what is missing
		}
	}
}
