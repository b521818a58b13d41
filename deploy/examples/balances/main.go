// Command balances is exactly with two stateful Go transforms, an example
// of a custom binary that keeps state per key (see "Stateful Go
// transforms" in cmd/exactly/docs/stateful.md):
//
//   - running-balance adds each payment to its account's balance and writes
//     the payment with the balance after it;
//   - on-change writes a device's status only when it differs from the
//     last status of that device.
//
// Run it as the exactly command, with balances.yaml:
//
//	go build -o balances ./deploy/examples/balances
//	./balances topics create deploy/examples/balances/balances.yaml
//	./balances run --topology deploy/examples/balances/balances.yaml
//	./balances test --topology deploy/examples/balances/balances.yaml   # the fixture, no Kafka needed
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

// register adds the transforms to transform.Default, which the CLI
// compiles topologies with: `- stateful: running-balance` and
// `- stateful: { func: on-change, store: ... }` call them.
func register() {
	transform.RegisterStateful("running-balance", RunningBalance)
	transform.RegisterStateful("on-change", OnChange)
}

// RunningBalance adds a payment's amount_cents (an integer, so the sum is
// exact) to the balance of its account, the record key, and writes the
// payment with balance_cents, the balance after it. The store holds each
// account's balance as decimal text. Payments must be keyed by account:
// the store is the input partition's, and the key decides the partition.
// A payment without an integer amount, or that would take the balance past
// the int64 range, is a dead letter, and changes no balance.
func RunningBalance(_ context.Context, r transform.Record, st transform.Store) ([]transform.Record, error) {
	if len(r.Key) == 0 {
		return nil, errors.New("payment has no key: key payments by account")
	}
	p, ok := r.Value.(map[string]any)
	if !ok {
		return nil, errors.New("payment is not a JSON object")
	}
	amount, ok := p["amount_cents"].(int64)
	if !ok {
		return nil, fmt.Errorf("amount_cents is %T, want an integer", p["amount_cents"])
	}
	var balance int64
	cur, found, err := st.Get(r.Key)
	if err != nil {
		return nil, err // the state is unavailable: the transaction is retried
	}
	if found {
		if balance, err = strconv.ParseInt(string(cur), 10, 64); err != nil {
			return nil, fmt.Errorf("stored balance of %q: %w", r.Key, err)
		}
	}
	next := balance + amount
	if (amount > 0 && next < balance) || (amount < 0 && next > balance) {
		return nil, fmt.Errorf("balance %d + %d overflows a 64-bit integer", balance, amount)
	}
	if err := st.Put(r.Key, strconv.AppendInt(nil, next, 10)); err != nil {
		return nil, err
	}
	p["balance_cents"] = next
	return []transform.Record{r}, nil
}

// OnChange writes a device's status record only when its status differs
// from the last status seen for its key (the first one is written), and
// filters it otherwise. The store holds the last status of each key.
func OnChange(_ context.Context, r transform.Record, st transform.Store) ([]transform.Record, error) {
	if len(r.Key) == 0 {
		return nil, errors.New("status has no key: key statuses by device")
	}
	v, _ := r.Value.(map[string]any)
	status, ok := v["status"].(string)
	if !ok {
		return nil, errors.New("status is missing or not a string")
	}
	last, found, err := st.Get(r.Key)
	if err != nil {
		return nil, err
	}
	if found && string(last) == status {
		return nil, nil // unchanged: nothing to write
	}
	if err := st.Put(r.Key, []byte(status)); err != nil {
		return nil, err
	}
	return []transform.Record{r}, nil
}
