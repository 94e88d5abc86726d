package batched

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// procPolicy is the policy of TestOutageProcesses, parent and children alike.
var procPolicy = policy.SlidingCounter{Limit: 3000, Window: 8 * time.Second}

// procTally is one child's account of its decisions, grouped.
type procTally struct {
	Proc         int
	FleetAtFault int64
	MaxLatencyNs int64
	BadErrors    []string
	// Groups: "key|phase|window|allowed|offline|limit" -> decisions.
	Groups map[string]int64
}

// runChild is a fleet process of TestOutageProcesses: it builds a limiter on BATCHED_REDIS, runs
// the same load as TestOutage, and talks to the parent over stdin and stdout: "phase N" and
// "stop" in; "ready", "online" and, after stop, its tally (JSON) out. It closes its limiter when
// stdin ends.
func runChild() int {
	idx, _ := strconv.Atoi(os.Getenv("BATCHED_PROC"))
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("BATCHED_REDIS"), PoolSize: 16, DisableIdentity: true, ContextTimeoutEnabled: true,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	defer c.Close()
	l, err := New(c, "outage", procPolicy, WithTimeout(faultTimeout), WithSyncInterval(faultSync), WithProcessID("p"+strconv.Itoa(idx)))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var phase atomic.Int32
	var stop atomic.Bool
	var mu sync.Mutex
	tally := procTally{Proc: idx, Groups: map[string]int64{}}
	var wg sync.WaitGroup
	w := rules.SlidingCounter(procPolicy).WindowMs()
	for g := range faultWorkers {
		wg.Go(func() {
			local := map[string]int64{}
			var maxLat int64
			var bad []string
			for i := 0; i < 400_000 && !stop.Load(); i++ {
				key := []string{"a", "b"}[(i+g)%2]
				ph := phase.Load()
				start := time.Now()
				d, err := l.Take(context.Background(), key, 1)
				maxLat = max(maxLat, int64(time.Since(start)))
				offline := err != nil
				if err != nil && (!errors.Is(err, ErrOffline) || !errors.Is(err, redisstore.ErrUnavailable)) && len(bad) < 5 {
					bad = append(bad, err.Error())
				}
				local[fmt.Sprintf("%s|%d|%d|%t|%t|%d", key, ph, d.ResetAt.UnixMilli()-w, d.Allowed, offline, d.Limit)]++
				time.Sleep(50 * time.Microsecond)
			}
			mu.Lock()
			for k, n := range local {
				tally.Groups[k] += n
			}
			tally.MaxLatencyNs = max(tally.MaxLatencyNs, maxLat)
			tally.BadErrors = append(tally.BadErrors, bad...)
			mu.Unlock()
		})
	}
	// Ready once this process counts the whole fleet, which it hears of only at the heartbeats
	// after the others' first: a loaded machine can take longer than any fixed wait.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var s Stats
		if l.Stats(&s); s.Fleet == faultProcs && !s.Offline {
			break
		}
		if time.Now().After(deadline) {
			fmt.Println("error", "no fleet of", faultProcs, "after 15s")
			return 1
		}
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		line := in.Text()
		switch {
		case strings.HasPrefix(line, "phase "):
			n, _ := strconv.Atoi(strings.TrimPrefix(line, "phase "))
			if n == 1 {
				var s Stats
				l.Stats(&s)
				tally.FleetAtFault = s.Fleet
			}
			phase.Store(int32(n))
			if n == 2 {
				go func() {
					for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
						var s Stats
						if l.Stats(&s); !s.Offline {
							fmt.Println("online")
							return
						}
					}
				}()
			}
		case line == "stop":
			stop.Store(true)
			wg.Wait()
			b, _ := json.Marshal(tally)
			fmt.Println("tally " + string(b))
		}
	}
	_ = l.Close()
	return 0
}

type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func (c *child) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c.in, s+"\n"); err != nil {
		t.Fatalf("to child: %v", err)
	}
}

func (c *child) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited before %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, prefix)
			}
		case <-timer.C:
			t.Fatalf("no %q from a child within %v", prefix, within)
		}
	}
}

// TestOutageProcesses is TestOutage with the three fleet processes as real subprocesses (this
// test binary run again as a child), each with its own Redis client, exchange goroutine and
// coarse clock: it pauses (SIGSTOP) or kills (SIGKILL, then restarts empty) a real redis-server
// under their load and checks that every call returned within its deadline, that decisions made
// alone wrap ErrOffline and took at most the limit divided by 3 per process, key and window, and
// that once Redis is back it counts at least every unit the fleet admitted.
func TestOutageProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three subprocesses")
	}
	for _, fault := range []string{"SIGSTOP", "SIGKILL"} {
		t.Run(fault, func(t *testing.T) { runOutageProcesses(t, fault) })
	}
}

func runOutageProcesses(t *testing.T, fault string) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	p := procPolicy
	w := rules.SlidingCounter(p).WindowMs()
	share := p.Limit / faultProcs
	// The boundary between two windows falls in the middle of the outage (see TestOutage).
	time.Sleep(time.Duration((2*w-boundaryAt-500-time.Now().UnixMilli()%w)%w) * time.Millisecond)
	children := make([]*child, faultProcs)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "BATCHED_CHILD=1", "BATCHED_PROC="+strconv.Itoa(i), "BATCHED_REDIS="+srv.Addr)
		cmd.SysProcAttr = childAttr()
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, in: in, lines: make(chan string, 16)}
		go func() {
			s := bufio.NewScanner(out)
			s.Buffer(make([]byte, 1<<20), 1<<24)
			for s.Scan() {
				c.lines <- s.Text()
			}
			close(c.lines)
		}()
		children[i] = c
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	for _, c := range children {
		c.expect(t, "ready", 20*time.Second)
	}
	time.Sleep(500 * time.Millisecond)
	for _, c := range children {
		c.send(t, "phase 1")
	}
	switch fault {
	case "SIGSTOP":
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	case "SIGKILL":
		srv.Kill()
	}
	time.Sleep(faultOutage)
	for _, c := range children {
		c.send(t, "phase 2")
	}
	switch fault {
	case "SIGSTOP":
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	case "SIGKILL":
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range children {
		c.expect(t, "online", 10*time.Second)
	}
	time.Sleep(300 * time.Millisecond)
	admitted := map[string]map[int64]int64{}
	var offlineCalls int64
	for _, c := range children {
		c.send(t, "stop")
		var tl procTally
		if err := json.Unmarshal([]byte(c.expect(t, "tally ", 20*time.Second)), &tl); err != nil {
			t.Fatal(err)
		}
		if tl.FleetAtFault != faultProcs {
			t.Errorf("process %d knew a fleet of %d when the fault began, want %d", tl.Proc, tl.FleetAtFault, faultProcs)
		}
		if time.Duration(tl.MaxLatencyNs) > faultTimeout+faultSlack {
			t.Errorf("process %d: a call took %v, more than the %v deadline plus %v", tl.Proc, time.Duration(tl.MaxLatencyNs), faultTimeout, faultSlack)
		}
		for _, e := range tl.BadErrors {
			t.Errorf("process %d: error %q wraps neither ErrOffline nor redisstore.ErrUnavailable", tl.Proc, e)
		}
		offAdmitted := map[string]int64{}
		for g, n := range tl.Groups {
			f := strings.Split(g, "|")
			key, phase := f[0], f[1]
			win, _ := strconv.ParseInt(f[2], 10, 64)
			allowed, offline := f[3] == "true", f[4] == "true"
			limit, _ := strconv.ParseInt(f[5], 10, 64)
			if offline {
				offlineCalls += n
				if phase != "0" && limit != p.Limit {
					t.Errorf("process %d: %d offline decisions with limit %d, want the policy's: %d", tl.Proc, n, limit, p.Limit)
				}
				if allowed && phase != "0" {
					offAdmitted[key+"|"+f[2]] += n
				}
			}
			if allowed {
				if admitted[key] == nil {
					admitted[key] = map[int64]int64{}
				}
				admitted[key][win] += n
			}
		}
		for kw, n := range offAdmitted {
			if n > share {
				t.Errorf("process %d admitted %d units of %s offline: more than its share %d", tl.Proc, n, kw, share)
			}
		}
	}
	if offlineCalls == 0 {
		t.Fatal("no decision was made offline: the outage was not seen")
	}
	requireReconciled(t, srv.Addr, p, admitted, func(key string) string { return stateKey(DefaultPrefix, space("outage", p.Window.Milliseconds()), key) })
	for _, c := range children {
		_ = c.in.Close()
	}
	for i, c := range children {
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("child %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("child %d did not exit within 10s of its stdin closing", i)
		}
	}
	t.Logf("%s: %d decisions made offline by 3 subprocesses", fault, offlineCalls)
}
