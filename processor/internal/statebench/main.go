// Command statebench measures the dedupe store at scale on a real broker:
// fill a store with N distinct IDs through the same transactions a stage
// uses (changelog records produced in a Kafka transaction, the store
// applied with its checkpoint after the commit), then a full restore of
// the changelog into an empty state dir, then a restart on that dir with
// a valid checkpoint. Each phase runs in its own process, so its peak RSS
// (VmHWM of /proc/self/status) is its own.
//
//	go run ./processor/internal/statebench -brokers 127.0.0.1:9092 -n 10000000
//
// With -mode stage it measures a real stage process instead (stage.go):
// `exactly run` with a dedupe step consumes N distinct IDs, restores them
// all into an empty state dir, and restarts with its checkpoints, and
// each phase's VmHWM is read from /proc/<pid>/status of that process:
//
//	go build -o /tmp/exactly ./cmd/exactly
//	go run ./processor/internal/statebench -mode stage -exactly /tmp/exactly -n 10000000
//
// It is a benchmark, not a test: it prints figures and checks only that
// each phase did what it must (N entries restored, 0 records on restart,
// and in the stage mode every resent ID dropped).
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/state"

	"github.com/exactly-io/exactly/integration/opstest"
)

const partitions = 3

func main() {
	brokers := flag.String("brokers", os.Getenv("EXACTLY_BROKERS"), "Kafka bootstrap servers")
	n := flag.Int("n", 1_000_000, "distinct IDs")
	dir := flag.String("dir", "", "working directory (default: a new temporary one)")
	phase := flag.String("phase", "all", "all, fill, restore or restart")
	topic := flag.String("topic", "", "changelog topic (default: a new one)")
	perTxn := flag.Int("txn", 20_000, "IDs per transaction while filling")
	keep := flag.Bool("keep", false, "keep the topics and the working directory")
	mode := flag.String("mode", "store", "store: the state code in a small process per phase; stage: a real `exactly run` stage process with a dedupe step")
	bin := flag.String("exactly", "", "with -mode stage: the exactly binary to run")
	resend := flag.Int("resend", 10_000, "with -mode stage: IDs already seen that each restart phase produces again, all to be dropped")
	timeout := flag.Duration("timeout", time.Hour, "with -mode stage: the longest a phase may take")
	flag.Parse()
	if *brokers == "" {
		log.Fatal("set -brokers or EXACTLY_BROKERS")
	}
	ctx := context.Background()
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...)}
	var err error
	switch {
	case *mode == "stage":
		err = stageMode(ctx, opts, *brokers, *bin, *n, *resend, *dir, *keep, *timeout)
	case *mode != "store":
		err = fmt.Errorf("unknown mode %q", *mode)
	case *phase == "all":
		err = all(ctx, opts, *brokers, *n, *dir, *topic, *perTxn, *keep)
	case *phase == "fill":
		err = fill(ctx, opts, *topic, filepath.Join(*dir, "fill"), *n, *perTxn)
	case *phase == "restore":
		err = restore(ctx, opts, *topic, filepath.Join(*dir, "restored"), int64(*n), false)
	case *phase == "restart":
		err = restore(ctx, opts, *topic, filepath.Join(*dir, "restored"), int64(*n), true)
	default:
		err = fmt.Errorf("unknown phase %q", *phase)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// all creates the changelog topic and runs each phase as a child process.
func all(ctx context.Context, opts []kgo.Opt, brokers string, n int, dir, topic string, perTxn int, keep bool) error {
	dir, cleanup, err := workDir(dir, "statebench-", keep)
	if err != nil {
		return err
	}
	defer cleanup()
	if topic == "" {
		topic = fmt.Sprintf("statebench-%d-dedupe-changelog", time.Now().UnixNano())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, partitions, -1, map[string]*string{"cleanup.policy": &compact}, topic); err != nil {
		cl.Close()
		return fmt.Errorf("create %s: %w", topic, err)
	}
	defer func() {
		if !keep {
			_, _ = adm.DeleteTopics(context.Background(), topic)
		}
		cl.Close()
	}()
	fmt.Printf("statebench: %d distinct IDs, changelog %s (%d partitions), dir %s\n", n, topic, partitions, dir)
	for _, ph := range []string{"fill", "restore", "restart"} {
		cmd := exec.CommandContext(ctx, os.Args[0], "-phase", ph, "-brokers", brokers, "-n", strconv.Itoa(n), "-dir", dir, "-topic", topic, "-txn", strconv.Itoa(perTxn))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("phase %s: %w", ph, err)
		}
	}
	return nil
}

// fill remembers n distinct IDs, perTxn per Kafka transaction, as a
// stage does: Check, Remember, Finish, produce, commit, then apply.
func fill(ctx context.Context, opts []kgo.Opt, topic, dir string, n, perTxn int) error {
	start := time.Now()
	db, err := state.Open(dir, "statebench", nil)
	if err != nil {
		return err
	}
	defer db.Close()
	d := state.NewDedupe(db, 7*24*time.Hour)
	cls, err := state.DescribeChangelog(ctx, opts, topic, []int32{0, 1, 2})
	if err != nil {
		return err
	}
	for p := range int32(partitions) {
		r, err := d.Restore(p, cls[p], start)
		if err != nil {
			return err
		}
		if _, err := r.Done(cls[p].End); err != nil {
			return err
		}
	}
	prod, err := kgo.NewClient(append(opts, kgo.TransactionalID(topic+"-fill"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000))...)
	if err != nil {
		return err
	}
	defer prod.Close()
	ends := map[int32]int64{}
	var perr error
	emit := func(p int32, key, value []byte) {
		prod.Produce(ctx, &kgo.Record{Topic: topic, Partition: p, Key: key, Value: value}, func(r *kgo.Record, err error) {
			if err != nil {
				perr = err
				return
			}
			ends[r.Partition] = max(ends[r.Partition], r.Offset+1)
		})
	}
	tx := d.Begin(emit)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < n; {
		if err := prod.BeginTransaction(); err != nil {
			return err
		}
		clear(ends)
		for j := 0; j < perTxn && i < n; j, i = j+1, i+1 {
			id := []byte("event-" + strconv.Itoa(i) + "-abcdefghijklmnop") // ~30 bytes, like a UUID
			dup, err := tx.Check(int32(i%partitions), id, base.Add(time.Duration(i)*time.Millisecond))
			if err != nil {
				return err
			}
			if dup {
				return fmt.Errorf("id %s: duplicate", id)
			}
			tx.Remember()
		}
		if _, err := tx.Finish(1000); err != nil {
			return err
		}
		if err := prod.Flush(ctx); err != nil {
			return err
		}
		if perr != nil {
			return perr
		}
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return err
		}
		if err := tx.Commit(ends); err != nil {
			return err
		}
	}
	el := time.Since(start)
	var total int64
	for _, e := range d.Size() {
		total += e
	}
	fmt.Printf("fill:    %d IDs in %s (%.0f IDs/s, changelog produced in transactions of %d), store %d entries, %s on disk, VmHWM %s\n",
		n, el.Round(time.Millisecond), float64(n)/el.Seconds(), perTxn, total, mib(dirSize(dir)), mib(hwm()))
	return nil
}

// restore brings an instance's store in dir to the changelog's end, as a
// stage's assignment does: a full restore into an empty dir, or, with
// restart, a restart on a dir with valid checkpoints.
func restore(ctx context.Context, opts []kgo.Opt, topic, dir string, n int64, restart bool) error {
	if !restart {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	start := time.Now()
	db, err := state.Open(dir, "statebench", nil)
	if err != nil {
		return err
	}
	d := state.NewDedupe(db, 7*24*time.Hour)
	parts := []int32{0, 1, 2}
	cls, err := state.DescribeChangelog(ctx, opts, topic, parts)
	if err != nil {
		return err
	}
	if f := os.Getenv("STATEBENCH_CPUPROFILE"); f != "" {
		// Where a restore's CPU goes (go tool pprof -top).
		w, err := os.Create(f)
		if err != nil {
			return err
		}
		defer w.Close()
		if err := pprof.StartCPUProfile(w); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rs := map[int32]state.Restorer{}
	rebuilt := 0
	for _, p := range parts {
		r, err := d.Restore(p, cls[p], start)
		if err != nil {
			return err
		}
		if r.Rebuild() != "" {
			rebuilt++
		}
		rs[p] = r
	}
	read, err := state.Replay(ctx, opts, topic, parts, rs, cls, state.ReplayHooks{})
	if err != nil {
		return err
	}
	el := time.Since(start)
	var total int64
	for _, e := range d.Size() {
		total += e
	}
	if err := db.Close(); err != nil {
		return err
	}
	if total != n {
		return fmt.Errorf("store holds %d IDs after the restore, want %d", total, n)
	}
	if restart {
		if read != 0 || rebuilt != 0 {
			return fmt.Errorf("restart with valid checkpoints read %d records and rebuilt %d partitions, want 0 and 0", read, rebuilt)
		}
		fmt.Printf("restart: %d changelog records read, %d of %d partitions rebuilt, %d entries ready in %s, VmHWM %s\n",
			read, rebuilt, len(parts), total, el.Round(time.Millisecond), mib(hwm()))
		return nil
	}
	fmt.Printf("restore: %d changelog records (%d entries) in %s: %.0f entries/s, %s on disk, VmHWM %s\n",
		read, total, el.Round(time.Millisecond), float64(total)/el.Seconds(), mib(dirSize(dir)), mib(hwm()))
	return nil
}

// hwm returns the process's peak resident set size, VmHWM, in bytes.
func hwm() int64 { return int64(opstest.VMStatus(os.Getpid()).VmHWM) }

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
		return nil
	})
	return n
}

func mib(b int64) string {
	if b < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// workDir returns dir, or when it is "" a new temporary directory whose
// name starts with prefix. cleanup removes a new directory unless keep; it
// leaves a given dir alone.
func workDir(dir, prefix string, keep bool) (_ string, cleanup func(), _ error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	if keep {
		return d, func() {}, nil
	}
	return d, func() { _ = os.RemoveAll(d) }, nil
}
