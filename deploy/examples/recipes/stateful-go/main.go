// Command stateful-go is exactly with one stateful Go transform,
// order-seq: it numbers each customer's orders in the order they come
// (seq 1, 2, 3, ...), with a store that keeps each customer's count.
//
//	go build -o exactly-seq ./deploy/examples/recipes/stateful-go
//	./exactly-seq test --topology deploy/examples/recipes/stateful-go/stateful-go.yaml
//	./exactly-seq run --topology deploy/examples/recipes/stateful-go/stateful-go.yaml
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/exactly-io/exactly/cmd/exactly/cli"
	"github.com/exactly-io/exactly/processor/transform"
)

func main() {
	register()
	os.Exit(cli.Main(os.Args[1:]))
}

// register adds order-seq to transform.Default, the registry the CLI
// compiles topologies with.
func register() {
	transform.RegisterStateful("order-seq", OrderSeq)
}

// OrderSeq sets seq, the order's number among its customer's orders,
// and first, true on a customer's first order. The record key is the
// customer; the store maps it to the count so far, as decimal text. An
// order without a key is a dead letter and counts nothing.
func OrderSeq(_ context.Context, r transform.Record, st transform.Store) ([]transform.Record, error) {
	if len(r.Key) == 0 {
		return nil, errors.New("order has no key: key orders by customer")
	}
	v, ok := r.Value.(map[string]any)
	if !ok {
		return nil, errors.New("order is not a JSON object")
	}
	var n int64
	cur, found, err := st.Get(r.Key)
	if err != nil {
		return nil, err // the store is unavailable: the transaction is retried
	}
	if found {
		if n, err = strconv.ParseInt(string(cur), 10, 64); err != nil {
			return nil, fmt.Errorf("stored count of %q: %w", r.Key, err)
		}
	}
	n++
	if err := st.Put(r.Key, strconv.AppendInt(nil, n, 10)); err != nil {
		return nil, err
	}
	v["seq"] = n
	v["first"] = n == 1
	return []transform.Record{r}, nil
}
