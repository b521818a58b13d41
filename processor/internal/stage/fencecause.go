package stage

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

// producerEpoch is a producer ID and epoch as the client last held them.
type producerEpoch struct {
	id    int64
	epoch int16
}

// noteProducer keeps the producer ID and epoch of the transaction that
// just committed: the next transaction runs under them (under
// transaction.version 2 each EndTxn bumps the epoch, and the client takes
// the new one from the response). The client has them loaded by then, so
// this asks no broker.
func (s *Stage) noteProducer(ctx context.Context, cl *kgo.Client) {
	if cl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if id, epoch, err := cl.ProducerID(ctx); err == nil && id >= 0 {
		s.producer.Store(&producerEpoch{id, epoch})
	}
}

// timedOut reports whether the coordinator of the stage's transactional
// ID says it aborted the ID's last transaction and no producer has
// initialized the ID since: the stale epoch came from a transaction
// timeout, not from another process. The abort state alone does not tell:
// another producer that initialized the ID and then aborted a transaction
// of its own leaves it too. So when the stage knows the epoch it ran
// under, the coordinator must hold the same producer ID at exactly one
// epoch more, the bump of its own timeout abort; another producer's
// InitProducerId bumps it again. detail is what the coordinator said, for
// the log ("" when it could not be asked).
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
	if d.State != "PrepareAbort" && d.State != "CompleteAbort" {
		return false, detail
	}
	if ours := s.producer.Load(); ours != nil {
		if d.ProducerID != ours.id || d.ProducerEpoch != ours.epoch+1 {
			detail += fmt.Sprintf("; this instance ran under producer ID %d epoch %d", ours.id, ours.epoch)
			return false, detail
		}
	}
	return true, detail
}
