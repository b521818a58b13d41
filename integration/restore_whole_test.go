//go:build integration

package integration

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/integration/opstest"
)

const pauseDuringRestore = "pause-during-restore"

// stopped reports whether process pid is stopped (SIGSTOP): state T in
// /proc/<pid>/stat.
func stopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}

// TestRestoreChangelogDeletedUnderIt: a dedupe stage's restore is stopped
// (pause-during-restore) after its first changelog records, the changelog's
// records are deleted (DeleteRecords to the end of every partition) while
// it is stopped, and it is resumed. The restore must not finish as if it
// had read everything: it says the records were deleted before it read
// them, restores again, and reports the lost partitions with the
// "partition state lost" warning, cause and consequence; then the stage
// runs on.
func TestRestoreChangelogDeletedUnderIt(t *testing.T) {
	in, out, _, stage, topo := dedupeTopology(t, 500)
	changelog := "exactly-" + stage + "-dedupe-changelog"
	exactlyCmd(t, "topics", "create", "--topology", topo)

	// Long random IDs: the changelog is several fetches long per
	// partition, so a restore paused early has most of it unread.
	const events = 12000
	rnd := rand.New(rand.NewPCG(1, 2))
	var lines [][]byte
	for i := range events {
		b := make([]byte, 100)
		for j := range b {
			b[j] = byte(rnd.Uint32())
		}
		id := fmt.Sprintf("e-%d-%s", i, hex.EncodeToString(b))
		lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q}`, id, id))
	}
	first := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir())
	kcatProduce(t, in, lines)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	first.stop()

	args := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir()}
	p := start(t, []string{failpointEnv + "=" + pauseDuringRestore + "@100"}, args...)
	waitLogged(t, p, pauseDuringRestore+"@100", 1, 2*time.Minute, "the restore never reached the failpoint")
	eventually(t, 30*time.Second, func() bool { return stopped(p.cmd.Process.Pid) }, func() string { return "the process did not stop itself" })

	cl := kafkaClient(t)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The broker refuses DeleteRecords on a topic compacted alone: allow
	// deletion for the while, as a mistaken policy change would.
	setPolicy := func(policy string) {
		t.Helper()
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &policy}}, changelog)
		if err == nil {
			_, err = rs.On(changelog, nil)
		}
		if err != nil {
			t.Fatalf("set cleanup.policy=%s on %s: %v", policy, changelog, err)
		}
	}
	setPolicy("compact,delete")
	ends, err := adm.ListEndOffsets(ctx, changelog)
	if err != nil {
		t.Fatal(err)
	}
	// The policy reaches the partition's leader a moment after the
	// change is acknowledged.
	var delErr error
	eventually(t, 30*time.Second, func() bool {
		del, err := adm.DeleteRecords(ctx, ends.Offsets())
		if err == nil {
			err = del.Error()
		}
		delErr = err
		return err == nil
	}, func() string { return fmt.Sprintf("delete records of %s: %v", changelog, delErr) })
	setPolicy("compact")
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	waitLogged(t, p, "state restored", 1, 2*time.Minute, "the resumed stage finished no restore")
	logs := p.logs.String()
	if !strings.Contains(logs, "deleted before the restore read them") {
		t.Fatalf("the restore did not see the records deleted under it:\n%s", tail(logs, 30))
	}
	if n := strings.Count(logs, `level=WARN msg="partition state lost`); n < 1 || !strings.Contains(logs, "pass the dedupe step again") {
		t.Fatalf("%d WARN lines of lost state (want at least 1, with the consequence):\n%s", n, tail(logs, 30))
	}

	// The stage goes on from what the changelog holds: new events pass.
	kcatProduce(t, in, [][]byte{line(events), line(events + 1)})
	waitGroupCaughtUp(t, "exactly-"+stage, in, 2*time.Minute)
	p.stop()
	if got := kcatCount(t, out); got != events+2 {
		t.Fatalf("%s holds %d records, want %d", out, got, events+2)
	}
}

// TestRestoreNamesForeignTransaction: another producer leaves a
// transaction open on a dedupe stage's changelog. The stage's restore
// waits for it; /readyz, the log, status and verify --hanging-after name
// it (partition, first offset, transactional ID). Once it aborts, the
// restore ends and the stage is ready.
func TestRestoreNamesForeignTransaction(t *testing.T) {
	in, _, _, stage, topo := dedupeTopology(t, 500)
	changelog := "exactly-" + stage + "-dedupe-changelog"
	exactlyCmd(t, "topics", "create", "--topology", topo)
	kcatProduce(t, in, [][]byte{line(0), line(1)})

	foreignID := uniqueName("foreign")
	foreign := kafkaClient(t, kgo.TransactionalID(foreignID), kgo.TransactionTimeout(5*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer foreign.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := foreign.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := foreign.ProduceSync(ctx, &kgo.Record{Topic: changelog, Partition: 1, Key: []byte("x"), Value: []byte("1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	addr := opstest.FreeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir(), "--metrics-addr", addr)
	want := fmt.Sprintf("changelog %s partition 1: waiting for an open transaction at offset 0", changelog)
	var body string
	eventually(t, time.Minute, func() bool {
		var code int
		code, body = get(t, "http://"+addr+"/readyz")
		return code != http.StatusOK && strings.Contains(body, want) && strings.Contains(body, foreignID)
	}, func() string { return "/readyz does not name the open transaction: " + body })
	waitLogged(t, p, "state restore waits for an open transaction", 1, time.Minute, "the log does not name the open transaction")

	st := exactlyCmd(t, "status", "--topology", topo, "--hanging-after", "1s")
	if !strings.Contains(st, changelog+"/1") || !strings.Contains(st, foreignID) {
		t.Fatalf("status does not list the open transaction on %s/1:\n%s", changelog, st)
	}
	rep, code := runVerify(t, topo, "--hanging-after", "1s")
	found := false
	for _, h := range rep.HangingTransactions {
		found = found || (h.Topic == changelog && h.Partition == 1 && h.TransactionalID == foreignID)
	}
	if code == 0 || rep.OK || !found {
		t.Fatalf("verify --hanging-after 1s: exit %d, ok %v, hanging %+v; want the changelog's open transaction as a problem", code, rep.OK, rep.HangingTransactions)
	}

	if err := foreign.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, p, "state restored", 1, time.Minute, "the restore did not end after the transaction aborted")
	waitReady(t, addr, time.Minute)
	p.stop()
}
