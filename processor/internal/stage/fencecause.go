package stage

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// A producer learns that its epoch is stale (PRODUCER_FENCED, or
// INVALID_PRODUCER_EPOCH from older brokers) in two cases that the error
// does not tell apart (KIP-98, KIP-360, KIP-588):
//   - another producer called InitProducerId with this transactional ID:
//     the coordinator bumped the epoch, aborted the open transaction and
//     handed the new epoch to that producer, and the ID's transaction is
//     then Empty, or Ongoing once it begins one;
//   - the coordinator aborted this producer's transaction itself, once
//     transaction.timeout.ms passed since it began (a process paused or
//     stalled that long): it bumps the epoch so that the late producer
//     cannot write into the next transaction, and the ID's transaction
//     stays PrepareAbort, then CompleteAbort, until a producer calls
//     InitProducerId again.
// Under transaction.version 2 (KIP-890) the client recovers from the
// second itself (the broker answers TRANSACTION_ABORTABLE); under
// version 1 it is fatal to the producer. Only the first means that another
// process runs under this instance's ID, so only it counts as a fence.

// fenceCheckTimeout bounds the look at the coordinator after a fence.
const fenceCheckTimeout = 10 * time.Second

// timedOut reports whether the coordinator of the stage's transactional
// ID says it aborted the ID's last transaction and no producer has
// initialized the ID since: the stale epoch came from a transaction
// timeout, not from another process. detail is what the coordinator said,
// for the log ("" when it could not be asked).
func (s *Stage) timedOut(ctx context.Context, adm *kadm.Client) (timedOut bool, detail string) {
	if adm == nil {
		return false, ""
	}
	ctx, cancel := context.WithTimeout(ctx, fenceCheckTimeout)
	defer cancel()
	id := s.cfg.TransactionalID()
	txns, err := adm.DescribeTransactions(ctx, id)
	if err != nil {
		return false, ""
	}
	d, ok := txns[id]
	if !ok || d.Err != nil {
		return false, ""
	}
	detail = fmt.Sprintf("its coordinator holds producer ID %d epoch %d in state %s, transaction timeout %s",
		d.ProducerID, d.ProducerEpoch, d.State, time.Duration(d.TimeoutMillis)*time.Millisecond)
	return d.State == "PrepareAbort" || d.State == "CompleteAbort", detail
}
