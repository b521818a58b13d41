//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/integration/internal/tcpproxy"
)

// The cluster profile: tests named TestCluster* run against the three-node
// cluster of deploy/local/cluster.sh, started by test.sh, which then sets
// EXACTLY_CLUSTER=1 and EXACTLY_BROKERS to the nodes' client ports. With
// EXACTLY_CLUSTER=1, TestMain runs one TCP proxy per node on its client port
// (the port the node advertises), forwarding to the node's bound EXTERNAL
// port: every exactly process reaches the cluster through the proxies, so
// a test can cut one node off while it stays alive. kcat and the fault
// tools use the nodes' INTERNAL listeners, never proxied. Without
// EXACTLY_CLUSTER=1 the cluster tests fail (test.sh's other integration
// step leaves them out with -skip).

// clusterNodes are the node IDs of cluster.sh.
var clusterNodes = []int32{1, 2, 3}

// clusterProxies are the running proxies by node ID, set by TestMain.
var clusterProxies map[int32]*tcpproxy.Proxy

func clusterOn() bool { return os.Getenv("EXACTLY_CLUSTER") == "1" }

// clusterPortBase is cluster.sh's CLUSTER_PORT_BASE: node N's client port
// is base+100N, its INTERNAL port base+100N+2, its EXTERNAL port +3.
func clusterPortBase() int {
	if b, err := strconv.Atoi(os.Getenv("CLUSTER_PORT_BASE")); err == nil {
		return b
	}
	return 19092
}

func clusterAddr(node int32, offset int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(clusterPortBase()+100*int(node)+offset))
}

// clusterDirect is the nodes' INTERNAL listeners, comma separated.
func clusterDirect() string {
	var s []string
	for _, n := range clusterNodes {
		s = append(s, clusterAddr(n, 2))
	}
	return strings.Join(s, ",")
}

// startClusterProxies starts the proxies when EXACTLY_CLUSTER=1; the
// returned function closes them.
func startClusterProxies() (func(), error) {
	if !clusterOn() {
		return func() {}, nil
	}
	clusterProxies = map[int32]*tcpproxy.Proxy{}
	closeAll := func() {
		for _, p := range clusterProxies {
			_ = p.Close()
		}
	}
	for _, n := range clusterNodes {
		p, err := tcpproxy.Listen(clusterAddr(n, 0), clusterAddr(n, 3))
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("proxy for node %d: %w", n, err)
		}
		clusterProxies[n] = p
	}
	return closeAll, nil
}

// kcatBrokers is the bootstrap list for kcat and the test's own clients:
// the direct listeners in the cluster profile, else EXACTLY_BROKERS.
func kcatBrokers(t testing.TB) string {
	t.Helper()
	if clusterOn() {
		return clusterDirect()
	}
	return brokers(t)
}

// cluster is the fault toolbox of the cluster profile.
type cluster struct {
	t   testing.TB
	cl  *kgo.Client
	adm *kadm.Client
	tv  int16 // transaction.version the cluster runs

	pending sync.WaitGroup // restarts running in the background
	mu      sync.Mutex
	errs    []error
}

// needCluster returns the toolbox, or fails the test outside the cluster
// profile.
func needCluster(t testing.TB) *cluster {
	t.Helper()
	if !clusterOn() || clusterProxies == nil {
		t.Fatal("cluster tests need the three-node cluster: bash deploy/local/cluster.sh start, then EXACTLY_CLUSTER=1 EXACTLY_BROKERS=$(bash deploy/local/cluster.sh brokers) (test.sh does this)")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(clusterDirect(), ",")...), kgo.RequestRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c := &cluster{t: t, cl: cl, adm: kadm.NewClient(cl)}
	t.Cleanup(func() { c.pending.Wait() })
	c.waitHealthy(2 * time.Minute)
	c.tv = c.transactionVersion()
	if want := os.Getenv("EXACTLY_CLUSTER_TV"); want != "" && want != strconv.Itoa(int(c.tv)) {
		t.Fatalf("the cluster runs transaction.version=%d, EXACTLY_CLUSTER_TV=%s", c.tv, want)
	}
	return c
}

// transactionVersion is the cluster's finalized transaction.version
// (KIP-1022), from an ApiVersions response.
func (c *cluster) transactionVersion() int16 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "exactly-it", "0"
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		c.t.Fatalf("api versions: %v", err)
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel
		}
	}
	return 0
}

// script runs deploy/local/cluster.sh with args.
func (c *cluster) script(args ...string) string {
	c.t.Helper()
	out, err := exec.Command("bash", append([]string{"../deploy/local/cluster.sh"}, args...)...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// restartLater restarts node in the background; settle waits for it.
func (c *cluster) restartLater(node int32) {
	c.pending.Add(1)
	go func() {
		defer c.pending.Done()
		out, err := exec.Command("bash", "../deploy/local/cluster.sh", "restart", strconv.Itoa(int(node))).CombinedOutput()
		if err != nil {
			c.mu.Lock()
			c.errs = append(c.errs, fmt.Errorf("cluster.sh restart %d: %v\n%s", node, err, out))
			c.mu.Unlock()
		}
	}()
}

// settle waits for background restarts, then for a healthy cluster.
func (c *cluster) settle() {
	c.t.Helper()
	c.pending.Wait()
	c.mu.Lock()
	errs := c.errs
	c.errs = nil
	c.mu.Unlock()
	for _, err := range errs {
		c.t.Fatal(err)
	}
	c.waitHealthy(2 * time.Minute)
}

func (c *cluster) kill(node int32)    { c.script("kill", strconv.Itoa(int(node))) }
func (c *cluster) term(node int32)    { c.script("term", strconv.Itoa(int(node))) }
func (c *cluster) restart(node int32) { c.script("restart", strconv.Itoa(int(node))) }

// leaderOf is the node ID leading topic's partition.
func (c *cluster) leaderOf(topic string, partition int32) int32 {
	c.t.Helper()
	var leader int32 = -1
	eventually(c.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := c.adm.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		p, ok := md.Topics[topic].Partitions[partition]
		if !ok || p.Err != nil || p.Leader < 0 {
			return false
		}
		leader = p.Leader
		return true
	}, func() string { return fmt.Sprintf("no leader for %s/%d", topic, partition) })
	return leader
}

// txnCoordinator is the node ID coordinating txnID: the leader of its
// __transaction_state partition.
func (c *cluster) txnCoordinator(txnID string) int32 {
	return c.coordinator(txnID, func(ctx context.Context) kadm.FindCoordinatorResponses {
		return c.adm.FindTxnCoordinators(ctx, txnID)
	})
}

// groupCoordinator is the node ID coordinating group: the leader of its
// __consumer_offsets partition.
func (c *cluster) groupCoordinator(group string) int32 {
	return c.coordinator(group, func(ctx context.Context) kadm.FindCoordinatorResponses {
		return c.adm.FindGroupCoordinators(ctx, group)
	})
}

func (c *cluster) coordinator(key string, find func(context.Context) kadm.FindCoordinatorResponses) int32 {
	c.t.Helper()
	var node int32 = -1
	eventually(c.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, ok := find(ctx)[key]
		if !ok || r.Err != nil {
			return false
		}
		node = r.NodeID
		return true
	}, func() string { return "no coordinator for " + key })
	return node
}

// activeController is the node ID of the KRaft quorum's leader, from
// DescribeQuorum (KIP-595), which brokers forward to the controller.
func (c *cluster) activeController() int32 {
	c.t.Helper()
	var node int32 = -1
	eventually(c.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := kmsg.NewPtrDescribeQuorumRequest()
		tp := kmsg.NewDescribeQuorumRequestTopic()
		tp.Topic = "__cluster_metadata"
		pt := kmsg.NewDescribeQuorumRequestTopicPartition()
		tp.Partitions = append(tp.Partitions, pt)
		req.Topics = append(req.Topics, tp)
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return false
		}
		node = resp.Topics[0].Partitions[0].LeaderID
		return node > 0
	}, func() string { return "no active controller" })
	return node
}

// waitHealthy waits until all three nodes are in the cluster and no
// partition of any topic is under-replicated, so that the next fault hits
// a whole cluster (with min.insync.replicas=2, two nodes down stop every
// write).
func (c *cluster) waitHealthy(timeout time.Duration) {
	c.t.Helper()
	var why string
	eventually(c.t, timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := c.adm.Metadata(ctx)
		if err != nil {
			why = err.Error()
			return false
		}
		if len(md.Brokers) != len(clusterNodes) {
			why = fmt.Sprintf("%d brokers in the metadata", len(md.Brokers))
			return false
		}
		for _, td := range md.Topics {
			for _, p := range td.Partitions {
				if len(p.ISR) < len(p.Replicas) || p.Leader < 0 {
					why = fmt.Sprintf("%s/%d: leader %d, isr %v of %v", td.Topic, p.Partition, p.Leader, p.ISR, p.Replicas)
					return false
				}
			}
		}
		return true
	}, func() string { return "cluster not healthy: " + why })
}

// lso is the last stable offset of every partition of topic, from the
// direct listeners; partitions that fail to answer are left out.
func (c *cluster) lso(topic string) map[int32]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	offs, _ := c.adm.ListCommittedOffsets(ctx, topic)
	m := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			m[o.Partition] = o.Offset
		}
	})
	return m
}

// commitWatch measures the time from a fault to the first transaction
// committed after it to a topic: it polls the topic's last stable offsets
// (read_committed ListOffsets, KIP-98) every 50 ms and reports the first
// moment one of them is past its value at the fault.
type commitWatch struct {
	done chan struct{}
	took time.Duration // -1 when nothing was committed before the deadline
}

func (c *cluster) watchCommit(topic string, at time.Time, before map[int32]int64, deadline time.Duration) *commitWatch {
	w := &commitWatch{done: make(chan struct{}), took: -1}
	go func() {
		defer close(w.done)
		for time.Since(at) < deadline {
			for p, o := range c.lso(topic) {
				if o > before[p] {
					w.took = time.Since(at)
					return
				}
			}
			time.Sleep(50 * time.Millisecond) // polling interval of the measurement
		}
	}()
	return w
}

func (w *commitWatch) wait() time.Duration { <-w.done; return w.took }

// failoverTimes collects commitWatch results by fault kind, for a p50/max
// summary at the end of a test.
type failoverTimes struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func (f *failoverTimes) add(kind string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[string][]time.Duration{}
	}
	f.by[kind] = append(f.by[kind], d)
}

// summary is one line per kind: n, p50, max (nearest rank).
func (f *failoverTimes) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var kinds []string
	for k := range f.by {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for _, k := range kinds {
		ds := slices.Clone(f.by[k])
		slices.Sort(ds)
		fmt.Fprintf(&b, "  %-18s n=%-3d p50=%-8s max=%s\n", k, len(ds),
			ds[(len(ds)-1)/2].Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond))
	}
	return b.String()
}
