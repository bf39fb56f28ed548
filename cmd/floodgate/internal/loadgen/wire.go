package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
)

// The wire client speaks gRPC's HTTP/2 protocol (h2c, prior knowledge)
// itself, for the one call a run makes. The load generator shares the
// machine with the service it measures, so every microsecond it spends per
// request is taken from the service; grpc-go's general-purpose client costs
// several times the service's own work per call. This one keeps only what a
// unary call needs:
//
//   - the worker that makes a call encodes and writes it itself, under the
//     connection's write lock; a writer that sees others queued behind it
//     leaves the flush to the last of them, so one write(2) carries the
//     requests of every worker that was waiting;
//   - one reader goroutine per connection reads the answers through a
//     buffered reader and hands each to its worker: one goroutine hand-off
//     per call, against three in grpc-go (worker → writer → reader → worker);
//   - the request is encoded by hand into a buffer the worker reuses, the
//     answer's overall_code is read without unmarshalling the response, and
//     the per-call timeout is a timer the worker reuses, so a call allocates
//     next to nothing.
//
// On the wire a call is what grpc-go sends: HEADERS (:method POST, :scheme,
// :path, :authority, content-type application/grpc, te trailers,
// grpc-timeout, user-agent) and one DATA frame; the service cannot tell the
// clients apart except by user-agent, and every service a run compares is
// sent the same bytes. The client obeys HTTP/2 flow control and the
// service's stream limit, answers SETTINGS and PING, and dials again after a
// GOAWAY or a broken connection.

// rlsPath is the method every call invokes.
const rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// wireClient shares a few HTTP/2 connections among the workers.
type wireClient struct {
	cfg   *Config
	slots []*wireSlot
	next  int // round-robin over slots when sessions are created
}

func newWireClient(cfg *Config) *wireClient {
	c := &wireClient{cfg: cfg}
	for range max(cfg.Conns, 1) {
		c.slots = append(c.slots, &wireSlot{addr: cfg.Addr, timeout: cfg.Timeout})
	}
	return c
}

func (c *wireClient) session(keys *keyPicker) session {
	sl := c.slots[c.next%len(c.slots)]
	c.next++
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	return &wireSession{
		slot:    sl,
		keys:    keys,
		domain:  c.cfg.Domain,
		entries: entryKeys(c.cfg),
		hits:    uint64(c.cfg.Cost),
		timeout: c.cfg.Timeout,
		timer:   timer,
		st:      &wireStream{done: make(chan struct{}, 1)},
	}
}

func (c *wireClient) close() error {
	for _, sl := range c.slots {
		sl.close()
	}
	return nil
}

// wireSlot holds one of the client's connections, dialled on first use and
// again when it breaks.
type wireSlot struct {
	addr    string
	timeout time.Duration

	cur    atomic.Pointer[wireConn] // the usable connection, or nil
	mu     sync.Mutex
	conn   *wireConn
	closed bool
}

// get returns a usable connection, dialling one if needed.
func (sl *wireSlot) get() (*wireConn, error) {
	if c := sl.cur.Load(); c != nil && !c.dead.Load() {
		return c, nil
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.closed {
		return nil, errors.New("client closed")
	}
	if sl.conn != nil && sl.conn.usable() {
		return sl.conn, nil
	}
	c, err := dialWire(sl.addr, sl.timeout)
	if err != nil {
		return nil, err
	}
	if sl.conn != nil {
		sl.conn.close() // it may still finish streams it started
	}
	sl.conn = c
	sl.cur.Store(c)
	return c, nil
}

func (sl *wireSlot) close() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.closed = true
	sl.cur.Store(nil)
	if sl.conn != nil {
		sl.conn.close()
	}
}

// Flow-control settings of the client's side: answers are small, so the
// windows are set large once and topped up rarely.
const (
	wireStreamWindow = 1 << 20
	wireConnWindow   = 1 << 30
)

// wireConn is one HTTP/2 connection.
type wireConn struct {
	nc        net.Conn
	authority string
	timeout   string // the grpc-timeout header's value

	// The write side: a caller holds wmu to write frames.
	waiting    atomic.Int32 // writers that want wmu or hold it
	wmu        sync.Mutex
	bw         *bufio.Writer
	fr         *http2.Framer // its write methods need wmu; ReadFrame is the reader's
	henc       *hpack.Encoder
	hbuf       bytes.Buffer
	nextID     uint32
	sendWindow int64 // connection send window; guarded by mu

	// mu guards the streams and the peer's settings, and cond signals a
	// grown window or a freed stream.
	mu           sync.Mutex
	cond         *sync.Cond
	streams      map[uint32]*wireStream
	active       uint32 // streams reserved or in flight
	maxStreams   uint32
	streamWindow int64       // the peer's initial stream window
	err          error       // set once the connection is unusable for new streams
	dead         atomic.Bool // err is set
	recvUnacked  uint32
}

// wireStream is a worker's call in flight. Its fields are guarded by the
// connection's mu while the stream is registered.
type wireStream struct {
	id      uint32
	done    chan struct{} // receives once when the call ends
	status  int           // :status
	hasGRPC bool
	grpc    int // grpc-status
	grpcMsg string
	data    []byte
	err     error
}

func dialWire(addr string, timeout time.Duration) (*wireConn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c := &wireConn{
		nc:           nc,
		authority:    addr,
		timeout:      grpcTimeout(timeout),
		bw:           bufio.NewWriterSize(nc, 32<<10),
		nextID:       1,
		sendWindow:   65535,
		streams:      make(map[uint32]*wireStream),
		maxStreams:   ^uint32(0),
		streamWindow: 65535,
	}
	c.cond = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, 32<<10))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err = c.bw.WriteString(http2.ClientPreface); err == nil {
		err = c.fr.WriteSettings(
			http2.Setting{ID: http2.SettingEnablePush, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: wireStreamWindow},
		)
	}
	if err == nil {
		err = c.fr.WriteWindowUpdate(0, wireConnWindow-65535)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err == nil {
		// Wait for the service's SETTINGS, as grpc-go does: calls sent
		// before them could exceed a stream limit not yet known.
		nc.SetReadDeadline(time.Now().Add(timeout))
		err = c.settings()
		nc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

// settings reads the service's first frame, which must be its SETTINGS,
// and acknowledges it.
func (c *wireConn) settings() error {
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("the service began with a %v frame, not SETTINGS", f.Header().Type)
	}
	c.applySettings(sf)
	if err := c.fr.WriteSettingsAck(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// applySettings takes in the service's settings.
func (c *wireConn) applySettings(f *http2.SettingsFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
		case http2.SettingInitialWindowSize:
			c.streamWindow = int64(s.Val)
		}
		return nil
	})
	c.cond.Broadcast()
}

// grpcTimeout spells d as a grpc-timeout header value: at most 8 digits
// and a unit.
func grpcTimeout(d time.Duration) string {
	for _, u := range []struct {
		unit string
		size time.Duration
	}{{"n", time.Nanosecond}, {"u", time.Microsecond}, {"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}} {
		if d%u.size == 0 && d/u.size < 1e8 {
			return strconv.FormatInt(int64(d/u.size), 10) + u.unit
		}
	}
	return strconv.FormatInt(int64((d+time.Hour-1)/time.Hour), 10) + "H"
}

func (c *wireConn) usable() bool { return !c.dead.Load() }

// broken sets c.err, making the connection unusable for new streams; c.mu
// must be held.
func (c *wireConn) broken(err error) {
	if c.err == nil {
		c.err = err
		c.dead.Store(true)
	}
	c.cond.Broadcast()
}

func (c *wireConn) close() {
	c.mu.Lock()
	c.broken(errors.New("connection closed"))
	c.mu.Unlock()
	c.nc.Close()
}

// start sends a call carrying msg (a gRPC length-prefixed message) on
// stream st.
func (c *wireConn) start(st *wireStream, msg []byte) error {
	c.mu.Lock()
	for c.err == nil && (c.active >= c.maxStreams || c.sendWindow < int64(len(msg))) {
		c.cond.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	if int64(len(msg)) > c.streamWindow {
		c.mu.Unlock()
		return fmt.Errorf("request of %d bytes exceeds the service's stream window of %d", len(msg), c.streamWindow)
	}
	c.sendWindow -= int64(len(msg))
	c.active++
	c.mu.Unlock()

	c.waiting.Add(1)
	c.wmu.Lock()
	id := c.nextID
	c.nextID += 2
	st.reset(id)
	c.mu.Lock()
	err := c.err
	if err == nil {
		c.streams[id] = st
	} else {
		c.active--
	}
	c.mu.Unlock()
	registered := err == nil
	if err == nil {
		c.hbuf.Reset()
		for _, f := range [...][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", rlsPath}, {":authority", c.authority},
			{"content-type", "application/grpc"}, {"user-agent", "floodgate-load"}, {"te", "trailers"},
			{"grpc-timeout", c.timeout},
		} {
			c.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
		if err == nil {
			err = c.fr.WriteData(id, true, msg)
		}
		if id >= 1<<31-2 {
			c.fail(errors.New("stream IDs exhausted"), false)
		}
	}
	// Leave the flush to a writer queued behind this one, if any.
	if c.waiting.Add(-1) == 0 && err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil && registered {
		// Failing the connection ends st, as every stream in flight.
		c.fail(err, true)
		<-st.done
	}
	return err
}

// cancel abandons stream st after its deadline. It reports false when the
// stream had already ended, in which case its result is in st.
func (c *wireConn) cancel(st *wireStream) bool {
	c.mu.Lock()
	_, live := c.streams[st.id]
	if live {
		c.forget(st)
	}
	broken := c.err != nil
	c.mu.Unlock()
	if live && !broken {
		c.write(func() error { return c.fr.WriteRSTStream(st.id, http2.ErrCodeCancel) })
	}
	return live
}

// fail makes the connection unusable for new streams; with all it also
// ends the streams in flight with err.
func (c *wireConn) fail(err error, all bool) {
	c.mu.Lock()
	c.broken(err)
	if all {
		for _, st := range c.streams {
			st.err = err
			c.end(st)
		}
	}
	c.mu.Unlock()
	if all {
		c.nc.Close()
	}
}

// write runs one frame write (a control frame, or a stream's reset) under
// the write lock.
func (c *wireConn) write(f func() error) {
	c.waiting.Add(1)
	c.wmu.Lock()
	err := f()
	if c.waiting.Add(-1) == 0 && err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(err, true)
	}
}

// read is the connection's reader: it hands every answer to its stream.
func (c *wireConn) read() {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("connection closed by the service")
			}
			c.fail(err, true)
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			c.mu.Lock()
			if st := c.streams[f.StreamID]; st != nil {
				for _, hf := range f.Fields {
					switch hf.Name {
					case ":status":
						st.status, _ = strconv.Atoi(hf.Value)
					case "grpc-status":
						st.hasGRPC = true
						st.grpc, _ = strconv.Atoi(hf.Value)
					case "grpc-message":
						st.grpcMsg = decodeGRPCMessage(hf.Value)
					}
				}
				if f.StreamEnded() {
					c.end(st)
				}
			}
			c.mu.Unlock()
		case *http2.DataFrame:
			c.mu.Lock()
			if st := c.streams[f.StreamID]; st != nil {
				st.data = append(st.data, f.Data()...)
				if f.StreamEnded() {
					c.end(st)
				}
			}
			c.recvUnacked += f.Length
			top := c.recvUnacked
			if top < wireConnWindow/2 {
				top = 0
			} else {
				c.recvUnacked = 0
			}
			c.mu.Unlock()
			if top > 0 {
				c.write(func() error { return c.fr.WriteWindowUpdate(0, top) })
			}
		case *http2.RSTStreamFrame:
			c.mu.Lock()
			if st := c.streams[f.StreamID]; st != nil {
				st.err = fmt.Errorf("stream reset by the service: %v", f.ErrCode)
				c.end(st)
			}
			c.mu.Unlock()
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			c.applySettings(f)
			c.write(c.fr.WriteSettingsAck)
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				c.write(func() error { return c.fr.WritePing(true, data) })
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.mu.Lock()
				c.sendWindow += int64(f.Increment)
				c.cond.Broadcast()
				c.mu.Unlock()
			}
		case *http2.GoAwayFrame:
			// Streams above LastStreamID were not processed; the
			// others finish on this connection. New calls dial anew.
			c.mu.Lock()
			c.broken(fmt.Errorf("service sent GOAWAY: %v", f.ErrCode))
			for id, st := range c.streams {
				if id > f.LastStreamID {
					st.err = c.err
					c.end(st)
				}
			}
			c.mu.Unlock()
		}
	}
}

// end unregisters st and wakes its worker; c.mu must be held.
func (c *wireConn) end(st *wireStream) {
	c.forget(st)
	st.done <- struct{}{}
}

// forget unregisters st; c.mu must be held.
func (c *wireConn) forget(st *wireStream) {
	delete(c.streams, st.id)
	c.active--
	if c.active+1 >= c.maxStreams {
		c.cond.Broadcast() // a caller may be waiting for a stream
	}
}

func (st *wireStream) reset(id uint32) {
	st.id, st.status, st.hasGRPC, st.grpc, st.grpcMsg = id, 0, false, 0, ""
	st.data, st.err = st.data[:0], nil
}

// wireSession is one worker's state: its request buffer, stream and timer.
type wireSession struct {
	slot    *wireSlot
	keys    *keyPicker
	domain  string
	entries []string // the descriptors' entry keys
	hits    uint64
	timeout time.Duration
	timer   *time.Timer
	st      *wireStream
	value   []byte // the key value
	entry   []byte // an encoded descriptor entry
	desc    []byte // an encoded descriptor
	msg     []byte // the gRPC message: prefix and encoded request
}

func (s *wireSession) call(ctx context.Context) (outcome, error) {
	c, err := s.slot.get()
	if err != nil {
		return outDenied, fmt.Errorf("connection: %w", err)
	}
	s.encode()
	st := s.st
	sent := time.Now()
	if err := c.start(st, s.msg); err != nil {
		return outDenied, fmt.Errorf("connection: %w", err)
	}
	s.timer.Reset(s.timeout)
	select {
	case <-st.done:
		s.timer.Stop()
	case <-s.timer.C:
		if c.cancel(st) {
			return outDenied, errDeadline
		}
		<-st.done // it ended as the timer fired
	case <-ctx.Done():
		s.timer.Stop()
		if c.cancel(st) {
			return outDenied, ctx.Err()
		}
		<-st.done
	}
	allowed, err := st.result()
	if err != nil && time.Since(sent) >= s.timeout {
		// The service gave up at the deadline it was sent (the
		// grpc-timeout header) just before the timer fired here.
		err = errDeadline
	}
	return decided(allowed), err
}

// errDeadline is a call's error after its timeout, worded as grpc-go's.
var errDeadline = errors.New("gRPC DeadlineExceeded: context deadline exceeded")

// encode writes the next request, as a gRPC message, to s.msg: a
// RateLimitRequest{domain, descriptors: [{entries: [{key, value}]}, ...],
// hits_addend}, the fields in number order as proto.Marshal writes them.
func (s *wireSession) encode() {
	s.value = s.keys.appendNext(s.value[:0])
	m := append(s.msg[:0], 0, 0, 0, 0, 0) // uncompressed; length below
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendString(m, s.domain)
	for _, key := range s.entries {
		e := protowire.AppendTag(s.entry[:0], 1, protowire.BytesType)
		e = protowire.AppendString(e, key)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendBytes(e, s.value)
		s.entry = e
		d := protowire.AppendTag(s.desc[:0], 1, protowire.BytesType)
		d = protowire.AppendBytes(d, e)
		s.desc = d
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendBytes(m, d)
	}
	if s.hits != 0 {
		m = protowire.AppendTag(m, 3, protowire.VarintType)
		m = protowire.AppendVarint(m, s.hits)
	}
	n := len(m) - 5
	m[1], m[2], m[3], m[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	s.msg = m
}

// result reads the ended call: whether it was allowed, or what went wrong,
// worded as the grpc-go client words it.
func (st *wireStream) result() (bool, error) {
	switch {
	case st.err != nil:
		return false, st.err
	case st.status != 200:
		return false, fmt.Errorf("HTTP status %d", st.status)
	case !st.hasGRPC:
		return false, errors.New("gRPC Internal: no grpc-status in the answer")
	case st.grpc != 0:
		return false, fmt.Errorf("gRPC %v: %s", codes.Code(st.grpc), st.grpcMsg)
	}
	code, err := overallCode(st.data)
	if err != nil {
		return false, err
	}
	switch code {
	case 1: // OK
		return true, nil
	case 2: // OVER_LIMIT
		return false, nil
	}
	return false, fmt.Errorf("unexpected overall_code %d", code)
}

// overallCode reads a RateLimitResponse's overall_code (field 1) from a
// gRPC message.
func overallCode(b []byte) (uint64, error) {
	if len(b) < 5 || b[0] != 0 {
		return 0, errors.New("gRPC Internal: malformed or compressed response")
	}
	n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
	if len(b) != 5+n {
		return 0, fmt.Errorf("gRPC Internal: response of %d bytes, %d expected", len(b)-5, n)
	}
	b = b[5:]
	var code uint64
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return 0, protowire.ParseError(k)
		}
		b = b[k:]
		if num == 1 && typ == protowire.VarintType {
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return 0, protowire.ParseError(k)
			}
			code, b = v, b[k:]
			continue
		}
		k = protowire.ConsumeFieldValue(num, typ, b)
		if k < 0 {
			return 0, protowire.ParseError(k)
		}
		b = b[k:]
	}
	return code, nil
}

// decodeGRPCMessage undoes the percent-encoding of a grpc-message header.
func decodeGRPCMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}
