package reset

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/internal/status"
)

// addOpen records each partition's last stable offset and high watermark,
// and, when a transaction is open on the topic, which: the partition
// leaders' DescribeProducers and the coordinators' DescribeTransactions
// (status.HangingTxns, with no age threshold). What cannot be described
// is kept in OpenErr: the positions are bounded by the last stable offset
// whatever it says.
func (p *Plan) addOpen(ctx context.Context, adm *kadm.Client, parts map[int32]partitionState) {
	p.Stable, p.HighWatermark = map[int32]int64{}, map[int32]int64{}
	open := false
	for n, s := range parts {
		p.Stable[n], p.HighWatermark[n] = s.stable, s.end
		open = open || s.stable < s.end
	}
	if !open {
		return
	}
	// One nanosecond: every transaction open now, whatever its age.
	p.Open, p.OpenErr = status.HangingTxns(ctx, adm, []string{p.Topic}, time.Nanosecond)
}

// printOpen writes the transactions open on the plan's partitions and
// what the reset does about each: nothing of one is skipped, since every
// new position is at most its partition's last stable offset.
func (p Plan) printOpen(w io.Writer) {
	var held []Change
	for _, c := range p.Changes {
		if p.Stable[c.Partition] < p.HighWatermark[c.Partition] {
			held = append(held, c)
		}
	}
	if len(held) == 0 {
		return
	}
	fmt.Fprintf(w, "open transactions on %s (a read_committed reader stops at the first offset of each until it ends):\n", p.Topic)
	if len(p.Open) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTITION\tFIRST OFFSET\tTRANSACTIONAL ID\tPRODUCER ID\tOPEN FOR\tTIMEOUT\tSTATE")
		for _, t := range p.Open {
			id, timeout, state := t.Cells()
			if t.State == "" {
				state = "unknown: " + t.Reason
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%s\n", t.Partition, t.StartOffset, id, t.ProducerID, t.Open().Round(time.Second), timeout, state)
		}
		_ = tw.Flush()
	}
	if p.OpenErr != nil {
		fmt.Fprintf(w, "(open transactions not all described: %v)\n", p.OpenErr)
	}
	for _, c := range held {
		s, h := p.Stable[c.Partition], p.HighWatermark[c.Partition]
		fmt.Fprintf(w, "partition %d: new position %d is at most the last stable offset %d (high watermark %d), so no open transaction is split: "+
			"the %s waits at %d until the transaction ends, then reads all of its records if it commits, none if it aborts.\n",
			c.Partition, c.New, s, h, p.Kind, s)
	}
	for _, t := range p.Open {
		if t.State != "" && (t.TimeoutMs == 0 || t.Open() <= t.Timeout()) {
			continue
		}
		// KIP-664: a transaction its coordinator does not know, or open
		// past its timeout, is never ended by the cluster itself.
		fmt.Fprintf(w, "partition %d: the transaction at %d hangs (%s): nothing will end it, so the %s would wait there for good; "+
			"abort it: kafka-transactions.sh --bootstrap-server BROKER abort --topic %s --partition %d --start-offset %d\n",
			t.Partition, t.StartOffset, hangReason(t), p.Kind, p.Topic, t.Partition, t.StartOffset)
	}
}

func hangReason(t status.OpenTxn) string {
	if t.State == "" {
		return t.Reason
	}
	return fmt.Sprintf("open for %s, past its timeout %s", t.Open().Round(time.Second), t.Timeout())
}
