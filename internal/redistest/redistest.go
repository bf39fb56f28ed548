// Package redistest starts real redis-server processes for tests: a single
// node, a Sentinel, or a three-master Cluster (with or without replicas), on
// free loopback ports, without persistence, in temporary directories,
// stopped when the test ends. When a test ends, each single node and Cluster
// node still running must hold no key without a TTL: floodgate writes every
// key with one, and a test that leaves one found a leak.
//
// A missing redis-server binary fails the test with the command that
// installs it; tests never skip because Redis is absent.
package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// installHint is how to get the binaries these helpers run.
const installHint = "redis-server and redis-cli are required: apt-get install redis-server"

// Server is one redis-server process. Its methods are safe for concurrent
// use.
type Server struct {
	// Addr is the server's "127.0.0.1:port" address.
	Addr string
	// Port is the server's TCP port.
	Port int
	// TLS, for a server made by StartTLS, is a client configuration that
	// trusts its certificate; nil for plain-text servers.
	TLS *tls.Config

	t     testing.TB
	dir   string
	conf  string // a configuration file, for Sentinel
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a single-node Redis on a free loopback port and stops it
// when t ends. extra are additional redis-server arguments.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	requireBinaries(t)
	var last error
	for range 5 {
		port := freePort(t, false)
		s := &Server{t: t, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: t.TempDir(), extra: extra}
		if last = s.start(); last == nil {
			t.Cleanup(s.Kill)
			t.Cleanup(s.checkTTLs)
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis-server: %v", last)
	return nil
}

func requireBinaries(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("redistest: %s not found in PATH; %s", bin, installHint)
		}
	}
}

// freePort returns a loopback port that was free a moment ago; with bus set,
// port+10000 (the Cluster bus) was free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 200 {
		var port int
		if bus {
			port = 20000 + rand.IntN(30000)
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("redistest: listen: %v", err)
			}
			port = l.Addr().(*net.TCPAddr).Port
			l.Close()
			if port+10000 > 65535 {
				continue
			}
		}
		if portFree(port) && (!bus || portFree(port+10000)) {
			return port
		}
	}
	t.Fatalf("redistest: no free loopback port")
	return 0
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// start launches the process and waits until it answers PING. The caller
// holds no lock.
func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if s.conf != "" {
		args = []string{s.conf, "--sentinel", "--daemonize", "no", "--loglevel", "warning",
			"--logfile", filepath.Join(s.dir, "redis.log")}
	}
	args = append(args, s.extra...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, strings.TrimSpace(string(log)))
		default:
		}
		r, err := s.Do("PING")
		if err == nil && r == "PONG" || err != nil && (strings.HasPrefix(err.Error(), "NOAUTH") || strings.HasPrefix(err.Error(), "LOADING")) {
			return nil // NOAUTH: up, with a password; LOADING: up, loading its dump
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on port %d did not answer PING within 10s", s.Port)
}

// Kill stops the process at once (SIGKILL) and waits for it to exit. It is
// a no-op when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	<-done
}

// Pause stops the process (SIGSTOP) without closing its connections: a hung
// server. Resume continues it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// Restart starts the server again on the same port, empty (no persistence,
// no scripts loaded) unless a SAVE left a dump in its directory, which it
// then loads, answering LOADING meanwhile; Restart returns once it answers.
// The server must have been killed.
func (s *Server) Restart() {
	s.t.Helper()
	var err error
	for range 50 { // the port may linger briefly after a kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v", err)
}

// KeysWithoutTTL returns the keys the server holds that never expire.
func (s *Server) KeysWithoutTTL() ([]string, error) {
	ttls, err := s.TTLs("*")
	var out []string
	for k, ttl := range ttls {
		if ttl < 0 {
			out = append(out, k)
		}
	}
	return out, err
}

// TTLs returns the keys the server holds that match the SCAN pattern
// match, with their time to live at ms resolution (-1 for none).
func (s *Server) TTLs(match string) (map[string]time.Duration, error) {
	c, err := s.dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	if slices.Contains(s.extra, "--cluster-enabled") {
		// A Cluster replica answers for its master's keys only when asked
		// to; a master ignores it.
		if _, err := send(c, r, "READONLY"); err != nil {
			return nil, err
		}
	}
	out := map[string]time.Duration{}
	cursor := "0"
	for {
		reply, err := send(c, r, "SCAN", cursor, "MATCH", match, "COUNT", "1000")
		if err != nil {
			return nil, err
		}
		lines := strings.Split(reply, "\n")
		cursor = lines[0]
		var keys []string
		for _, k := range lines[1:] {
			if k != "" {
				keys = append(keys, k)
			}
		}
		// One PTTL per key, pipelined.
		var b strings.Builder
		for _, k := range keys {
			writeCommand(&b, []string{"PTTL", k})
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			return nil, err
		}
		for _, k := range keys {
			v, err := readReply(r)
			if err != nil {
				return nil, err
			}
			switch ms, _ := strconv.ParseInt(v, 10, 64); {
			case ms == -1:
				out[k] = -1
			case ms >= 0:
				out[k] = time.Duration(ms) * time.Millisecond
			} // -2: expired since the SCAN
		}
		if cursor == "0" {
			return out, nil
		}
	}
}

// checkTTLs fails the test if the server, when it ends, is running and
// holds a key without a TTL.
func (s *Server) checkTTLs() {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if !running {
		return
	}
	s.Resume() // a test that stopped the server may end with it stopped
	keys, err := s.KeysWithoutTTL()
	switch {
	case err != nil:
		s.t.Errorf("redistest: %s: listing keys without a TTL: %v", s.Addr, err)
	case len(keys) > 0:
		if len(keys) > 10 {
			keys = append(keys[:10], fmt.Sprintf("(%d more)", len(keys)-10))
		}
		s.t.Errorf("redistest: %s holds keys without a TTL: %s", s.Addr, strings.Join(keys, ", "))
	}
}

// Do sends one command over a fresh connection (authenticated with the
// server's --requirepass, if any) and returns its reply flattened to a
// string: arrays are joined with newlines, nil is "", an error reply is
// returned as an error.
func (s *Server) Do(args ...string) (string, error) {
	c, err := s.dial()
	if err != nil {
		return "", err
	}
	return do(c, args)
}

// dial connects to the server, with TLS for a TLS server, and
// authenticates with its --requirepass, if any.
func (s *Server) dial() (net.Conn, error) {
	d := &net.Dialer{Timeout: time.Second}
	var c net.Conn
	var err error
	if s.TLS == nil {
		c, err = d.Dial("tcp", s.Addr)
	} else {
		c, err = tls.DialWithDialer(d, "tcp", s.Addr, s.TLS)
	}
	if err != nil {
		return nil, err
	}
	for i, a := range s.extra {
		if a == "--requirepass" && i+1 < len(s.extra) {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := send(c, bufio.NewReader(c), "AUTH", s.extra[i+1]); err != nil {
				c.Close()
				return nil, fmt.Errorf("redistest: AUTH: %w", err)
			}
		}
	}
	return c, nil
}

// MustDo is Do that fails the test on error.
func (s *Server) MustDo(args ...string) string {
	s.t.Helper()
	r, err := s.Do(args...)
	if err != nil {
		s.t.Fatalf("redistest: %s %v: %v", s.Addr, args, err)
	}
	return r
}

// CPU returns the CPU time the server process has used so far, user and
// system, all threads (INFO cpu). Benchmarks take the difference across a
// run: unlike INFO commandstats, which times commands by the clock, it
// does not count the time the server waited for a core on a busy machine.
func (s *Server) CPU() time.Duration {
	s.t.Helper()
	var sum float64
	for _, line := range strings.Split(s.MustDo("INFO", "cpu"), "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				s.t.Fatalf("redistest: INFO cpu: %q: %v", line, err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// CommandCalls returns the calls counted by INFO commandstats, by command
// name ("fcall", "get", "function|load", ...).
func (s *Server) CommandCalls() map[string]int64 {
	s.t.Helper()
	out := map[string]int64{}
	for _, line := range strings.Split(s.MustDo("INFO", "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// Do sends one command to addr over a fresh connection; see Server.Do.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	return do(c, args)
}

// do sends one command on c, reads its reply and closes c.
func do(c net.Conn, args []string) (string, error) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return send(c, bufio.NewReader(c), args...)
}

// send writes one command on c and reads its reply from r, c's reader.
func send(c net.Conn, r *bufio.Reader, args ...string) (string, error) {
	var b strings.Builder
	writeCommand(&b, args)
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(r)
}

func writeCommand(b *strings.Builder, args []string) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(a), a)
	}
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) that
// monitors master under the name "mymaster" with a quorum of 1, and stops it
// when t ends. lines are extra lines of its configuration file, such as
// "sentinel down-after-milliseconds mymaster 500".
func StartSentinel(t testing.TB, master *Server, lines ...string) *Server {
	t.Helper()
	requireBinaries(t)
	var last error
	for range 5 {
		port := freePort(t, false)
		s := &Server{t: t, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: t.TempDir()}
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\n", port, s.dir, master.Port)
		for _, line := range lines {
			body += line + "\n"
		}
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s.conf = conf
		if last = s.start(); last == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis sentinel: %v", last)
	return nil
}

// Cluster is a Redis Cluster of three masters, with or without replicas.
type Cluster struct {
	// Nodes are the masters; Nodes[i].Addr are the seed addresses.
	Nodes []*Server
	// Replicas[i] are the replicas of Nodes[i] (none for StartCluster).
	Replicas [][]*Server

	opts ClusterOptions // the nodes', for AddMaster
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// ClusterOptions shape a Cluster made by StartClusterWith.
type ClusterOptions struct {
	// Replicas is the number of replicas of each master.
	Replicas int
	// Args are redis-server arguments for every node. Nil runs the nodes
	// with Redis's own defaults (a 15 s cluster-node-timeout and
	// cluster-require-full-coverage yes among them).
	Args []string
	// InMemory keeps the nodes' files (nodes.conf, the log) on /dev/shm
	// when the machine has it: a node writes and fsyncs nodes.conf on
	// every CLUSTER SETSLOT, which on a busy disk stalls it for up to
	// seconds, a cost of the machine and not of what a test measures.
	InMemory bool
}

// memDir returns a directory on /dev/shm removed when t ends, or, without
// /dev/shm, t.TempDir().
func memDir(t testing.TB) string {
	dir, err := os.MkdirTemp("/dev/shm", "redistest-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StartCluster starts three Cluster-enabled masters without replicas, with
// a 1 s node timeout and cluster-require-full-coverage no, joins them with
// redis-cli --cluster create and waits until every node reports
// cluster_state:ok. The nodes stop when t ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{Args: []string{
		"--cluster-node-timeout", "1000",
		"--cluster-require-full-coverage", "no",
	}})
}

// StartClusterWith starts three masters with o.Replicas replicas each, all
// run with o.Args, joins them with redis-cli --cluster create and waits until
// every node reports cluster_state:ok and every replica is in sync with
// its master. The nodes stop when t ends.
func StartClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	requireBinaries(t)
	var all []*Server
	for range 3 * (1 + o.Replicas) {
		all = append(all, startClusterNode(t, o))
	}
	args := []string{"--cluster", "create"}
	for _, n := range all {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	wait := func(n *Server, what string, ok func() bool) {
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not %s after 30s", n.Addr, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, n := range all {
		wait(n, "ok", func() bool {
			info, err := n.Do("CLUSTER", "INFO")
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	// redis-cli chooses the roles: read them back, once every node's are
	// known (a replica shows as a master without slots until it is).
	byAddr := map[string]*Server{}
	for _, n := range all {
		byAddr[n.Addr] = n
	}
	var c *Cluster
	wait(all[0], "aware of every role", func() bool {
		c = roles(all[0].MustDo("CLUSTER", "NODES"), byAddr)
		c.opts = o
		if len(c.Nodes) != 3 {
			return false
		}
		for _, reps := range c.Replicas {
			if len(reps) != o.Replicas {
				return false
			}
		}
		return true
	})
	for _, reps := range c.Replicas {
		for _, r := range reps {
			wait(r, "in sync", func() bool {
				info, err := r.Do("INFO", "replication")
				return err == nil && strings.Contains(info, "master_link_status:up")
			})
		}
	}
	return c
}

// startClusterNode starts a Cluster-enabled node, not yet in a Cluster,
// run with o's arguments, and stops it when t ends.
func startClusterNode(t testing.TB, o ClusterOptions) *Server {
	t.Helper()
	var last error
	for range 5 {
		port := freePort(t, true)
		dir := t.TempDir()
		if o.InMemory {
			dir = memDir(t)
		}
		s := &Server{t: t, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
		s.extra = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
		}, o.Args...)
		if last = s.start(); last == nil {
			t.Cleanup(s.Kill)
			t.Cleanup(s.checkTTLs)
			return s
		}
	}
	t.Fatalf("redistest: cannot start cluster node: %v", last)
	return nil
}

// roles reads the masters (the nodes serving slots) and their replicas from
// CLUSTER NODES output.
func roles(nodes string, byAddr map[string]*Server) *Cluster {
	c := &Cluster{}
	masterOf := map[string]string{} // replica id → master id
	addrOf := map[string]string{}   // node id → address
	var masters []string
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addrOf[f[0]] = addr
		switch {
		case strings.Contains(f[2], "master") && len(f) > 8:
			masters = append(masters, f[0])
		case strings.Contains(f[2], "slave"):
			masterOf[f[0]] = f[3]
		}
	}
	for _, id := range masters {
		c.Nodes = append(c.Nodes, byAddr[addrOf[id]])
		var reps []*Server
		for rid, mid := range masterOf {
			if mid == id {
				reps = append(reps, byAddr[addrOf[rid]])
			}
		}
		c.Replicas = append(c.Replicas, reps)
	}
	return c
}
