// Package redistest runs a real redis-server (or the program $SLIDELIMIT_REDIS_SERVER names,
// such as valkey-server) on a free loopback port, for the tests and benchmarks of programs that
// use redisstore (this repository's own among them), and lets a test kill it (SIGKILL), pause it
// (SIGSTOP), resume it and start it again on the same port, to see what a store outage does. It
// installs nothing: if the program is not on PATH, Start returns ErrNotInstalled. It is a test
// helper in the way net/http/httptest is: not for production code.
//
// A Server's methods may be called from any goroutine, but not concurrently with each other.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNotInstalled is returned by Start when the server program is not on PATH.
var ErrNotInstalled = errors.New("redistest: server program not found on PATH")

// EnvServer names the environment variable that chooses the server program: redis-server when
// unset, or for example valkey-server, so that the same tests run against Valkey.
const EnvServer = "SLIDELIMIT_REDIS_SERVER"

// Program returns the server program the harness runs: $SLIDELIMIT_REDIS_SERVER, or
// redis-server. It only reads the environment, and may be called from any goroutine.
func Program() string {
	if p := os.Getenv(EnvServer); p != "" {
		return p
	}
	return "redis-server"
}

// Server is one redis-server child process listening on 127.0.0.1. Its methods are not safe for
// concurrent use: one goroutine (a test's) starts, pauses, kills and restarts it, while any
// number of clients use Addr.
type Server struct {
	// Addr is "127.0.0.1:port"; it stays the same across Kill and Restart.
	Addr   string
	port   int
	bin    string
	dir    string
	extra  []string
	conf   string // a sentinel's configuration file
	cmd    *exec.Cmd
	waited chan struct{}
	paused bool
}

// Start runs redis-server on a free loopback port with persistence off and waits until it
// answers PING; extra arguments are appended to its command line (for example
// "--cluster-enabled", "yes"). The process dies with the test binary (Pdeathsig), so a crashed
// test leaves no server behind. Parallel tests may each call Start: every server gets its own
// port and directory. Start may be called from several goroutines at once.
func Start(extra ...string) (*Server, error) {
	return startWith("", extra)
}

// StartSentinel runs a sentinel (the server program with --sentinel) on a free loopback port,
// monitoring the master at masterAddr under name, with a quorum of 1. Safe to call from parallel
// tests, from several goroutines at once, as Start is.
func StartSentinel(name, masterAddr string) (*Server, error) {
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return nil, err
	}
	return startWith(fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 60000\n", name, host, port, name), nil)
}

func startWith(sentinelConf string, extra []string) (*Server, error) {
	bin, err := exec.LookPath(Program())
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotInstalled, Program())
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	conf := ""
	if sentinelConf != "" {
		// A sentinel rewrites its configuration file, so it must have one of its own.
		conf = filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(sentinelConf), 0o600); err != nil {
			return nil, err
		}
	}
	var lastErr error
	// A port found free can be taken by someone else before redis-server binds it: try a few.
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, bin: bin, dir: dir, extra: extra, conf: conf}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--logfile", "", "--loglevel", "warning")
	if s.conf != "" {
		cmd = exec.Command(s.bin, s.conf, "--sentinel", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
			"--dir", s.dir, "--daemonize", "no", "--logfile", "", "--loglevel", "warning")
	}
	cmd.Args = append(cmd.Args, s.extra...)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start: %w", err)
	}
	s.cmd, s.paused = cmd, false
	s.waited = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.waited)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.waited:
			return fmt.Errorf("redistest: redis-server on port %d exited at start", s.port)
		default:
		}
		if ping(s.Addr) == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redistest: redis-server on port %d did not answer PING within 5s", s.port)
}

// ping sends an inline PING and expects +PONG, without any client library (no pool goroutines).
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server with a password answers, and so is up, but refuses PING before AUTH.
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("redistest: unexpected reply %q", line)
	}
	return nil
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	if s.paused {
		_ = cont(s.cmd.Process)
	}
	_ = s.cmd.Process.Kill()
	<-s.waited
	s.cmd, s.paused = nil, false
}

// Kill sends SIGKILL and waits for the process to exit: every connection drops and the port
// refuses new ones until Restart. Not safe for concurrent use with the Server's other methods;
// clients using Addr from other goroutines meanwhile get connection errors.
func (s *Server) Kill() { s.kill() }

// Pause sends SIGSTOP (on Unix; elsewhere it returns an error): the kernel still accepts
// connections and buffers requests, but nothing is answered until Resume. Not safe for concurrent
// use with the Server's other methods; clients on other goroutines may go on sending, and their
// calls wait for Resume or for their own deadline.
func (s *Server) Pause() error {
	if s.cmd == nil || s.paused {
		return errors.New("redistest: Pause: not running")
	}
	if err := stop(s.cmd.Process); err != nil {
		return err
	}
	s.paused = true
	return nil
}

// Resume sends SIGCONT to a paused server. Not safe for concurrent use with the Server's other
// methods; clients on other goroutines may use Addr throughout.
func (s *Server) Resume() error {
	if s.cmd == nil || !s.paused {
		return errors.New("redistest: Resume: not paused")
	}
	s.paused = false
	return cont(s.cmd.Process)
}

// Restart starts a killed server again on the same port, empty. Not safe for concurrent use with
// the Server's other methods; clients on other goroutines may keep using Addr, which answers again
// once Restart has returned nil.
func (s *Server) Restart() error {
	if s.cmd != nil {
		return errors.New("redistest: Restart: still running")
	}
	var err error
	// The old socket may linger briefly; a few tries cover it.
	for range 5 {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Stop kills the server (paused or not) and removes its directory. It is idempotent. Not safe for
// concurrent use with the Server's other methods; clients still using Addr from other goroutines
// get connection errors.
func (s *Server) Stop() {
	s.kill()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
		s.dir = ""
	}
}
