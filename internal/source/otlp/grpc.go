package otlpsource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	_ "github.com/sluicehq/sluice/internal/grpcgzip" // senders may compress
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/panics"
)

// exportMethod is the one gRPC method the source serves.
const exportMethod = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"

// maxStreams is the most calls one connection may have in progress.
const maxStreams = 128

// newGRPCServer returns the gRPC server of the source. Every call goes
// through tap first, which takes maxRequestBytes from the budget before
// gRPC reads the request (or refuses the call), and marks the connection
// Receiving; the handler then holds what the request really needs.
func (s *Source) newGRPCServer(tlsConf *tls.Config) *grpc.Server {
	var inner credentials.TransportCredentials
	if tlsConf != nil {
		inner = credentials.NewTLS(tlsConf)
	}
	opts := []grpc.ServerOption{
		grpc.Creds(&connCreds{inner: inner, s: s}),
		grpc.InTapHandle(s.tap),
		grpc.MaxRecvMsgSize(int(s.maxBody)),
		grpc.MaxConcurrentStreams(maxStreams),
		// The TLS handshake and HTTP/2 preface of a new connection.
		grpc.ConnectionTimeout(10 * time.Second),
	}
	if idle := s.hygiene.IdleTimeout; idle > 0 {
		// gRPC closes an idle connection politely (GOAWAY) a little before
		// the group would close it outright.
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle - min(idle/10, 5*time.Second)}))
	}
	opts = append(opts, grpc.ForceServerCodecV2(rawCodec{}))
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&logsService, s)
	return srv
}

// explicitListener hands gRPC the group's connections marked explicit:
// HTTP/2 reads are not messages (see listener.Conn.SetExplicit).
type explicitListener struct{ *listener.Listener }

func (l explicitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		if lc := listener.Of(c); lc != nil {
			lc.SetExplicit()
		}
	}
	return c, err
}

// connCreds is the source's transport credentials: TLS when configured,
// else none; either way the handshake hands on the connection's state, so
// that every call can mark it.
type connCreds struct {
	inner credentials.TransportCredentials // nil: plaintext
	s     *Source
}

// connInfo is what a connection's calls find in their peer's AuthInfo.
type connInfo struct {
	credentials.AuthInfo
	st *connState
}

func (c *connCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	st := &connState{lc: listener.Of(raw)}
	if c.inner == nil {
		return raw, connInfo{AuthInfo: insecureInfo{}, st: st}, nil
	}
	conn, info, err := c.inner.ServerHandshake(raw)
	if err != nil {
		if lc := listener.Of(raw); lc == nil || lc.ClosedBy() == "" {
			c.s.rejects.Add(reasonProtocol, raw.RemoteAddr().String(), "err", err)
		}
		return nil, nil, err
	}
	return conn, connInfo{AuthInfo: info, st: st}, nil
}

func (c *connCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("otlp source: server credentials cannot dial")
}

func (c *connCreds) Info() credentials.ProtocolInfo {
	if c.inner == nil {
		return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
	}
	return c.inner.Info()
}

func (c *connCreds) Clone() credentials.TransportCredentials {
	cc := *c
	if c.inner != nil {
		cc.inner = c.inner.Clone()
	}
	return &cc
}

func (c *connCreds) OverrideServerName(string) error { return nil }

type insecureInfo struct{}

func (insecureInfo) AuthType() string { return "insecure" }

// connState counts a connection's calls by phase and keeps its listener
// state in step: Busy while any call is being handled, else Receiving
// while any request is arriving, else Idle.
type connState struct {
	lc *listener.Conn // nil for a connection from elsewhere (tests)

	mu              sync.Mutex
	receiving, busy int
	state           listener.State
}

func (c *connState) change(dReceiving, dBusy int) {
	if c == nil || c.lc == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.receiving += dReceiving
	c.busy += dBusy
	want := listener.Idle
	switch {
	case c.busy > 0:
		want = listener.Busy
	case c.receiving > 0:
		want = listener.Receiving
	}
	if want == c.state {
		return
	}
	c.state = want
	switch want {
	case listener.Busy:
		c.lc.Busy()
	case listener.Receiving:
		c.lc.Receiving()
	default:
		c.lc.Idle()
	}
}

// call is one gRPC call: its bytes in the budget and its phase. tap makes
// it; the handler takes it over; the end of the call's context releases
// what the handler never took over.
type call struct {
	conn   *connState
	budget *listener.Budget
	// stopEnd unregisters end from the call's context: a call the handler
	// took over needs no goroutine when it ends.
	stopEnd func() bool

	mu    sync.Mutex
	hold  listener.Hold
	phase int // callArriving, callHandled, callDone
}

const (
	callArriving = iota
	callHandled
	callDone
)

type callKey struct{}

// tap runs in the connection's reader as a call begins, before its
// request is read: an Export call takes maxRequestBytes from the budget
// (gRPC allocates up to that much for the request) or is refused with
// UNAVAILABLE and a RetryInfo, which OpenTelemetry exporters honour.
func (s *Source) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	var conn *connState
	if p, ok := peer.FromContext(ctx); ok {
		if ci, ok := p.AuthInfo.(connInfo); ok {
			conn = ci.st
		}
	}
	s.mu.Lock()
	budget := s.budget
	s.mu.Unlock()
	c := &call{conn: conn, budget: budget, hold: listener.NewHold(budget)}
	if info.FullMethodName == exportMethod {
		if err := reserve(&c.hold, budget, s.maxBody); err != nil {
			addr := ""
			if p, ok := peer.FromContext(ctx); ok {
				addr = p.Addr.String()
			}
			s.rejects.Add(reasonOverBudget, addr, "maxBytesInFlight", budget.Limit())
			return ctx, retryStatus(codes.Unavailable, err.Error())
		}
	}
	conn.change(1, 0)
	c.mu.Lock()
	c.stopEnd = panics.AfterFunc(ctx, "otlp source "+s.env.Name+": end of a gRPC call", c.end)
	c.mu.Unlock()
	return context.WithValue(ctx, callKey{}, c), nil
}

// handled marks the call's request arrived and handed to the handler,
// which then owns its hold; false when the call ended already.
func (c *call) handled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase != callArriving {
		return false
	}
	c.phase = callHandled
	c.stopEnd()
	c.conn.change(-1, 1)
	return true
}

// finish ends a handled call: its bytes go back to the budget.
func (c *call) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold.Release()
	c.phase = callDone
	c.conn.change(0, -1)
}

// end runs when the call's context ends: a call whose request never
// reached the handler gives its bytes back here.
func (c *call) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase != callArriving {
		return
	}
	c.hold.Release()
	c.phase = callDone
	c.conn.change(-1, 0)
}

// The LogsService is registered by hand rather than with plogotlp's
// RegisterGRPCServer, whose handler gets the request already decoded: here
// the handler gets the request's bytes (rawCodec), so that the budget is
// taken for what decoding will allocate before pdata decodes them, as on
// the HTTP side. The request and answer are pdata's all the same.
var logsService = grpc.ServiceDesc{
	ServiceName: "opentelemetry.proto.collector.logs.v1.LogsService",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Export",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req request
			if err := dec(&req); err != nil {
				return nil, err
			}
			// Decoding copies what it keeps (pdata's strings and bytes,
			// then the events' bodies): the buffer goes back to the pool
			// when the call is answered.
			defer req.buf.Free()
			return srv.(*Source).exportGRPC(ctx, req.buf.ReadOnlyData())
		},
	}},
	Metadata: "opentelemetry/proto/collector/logs/v1/logs_service.proto",
}

// rawCodec hands the handler a request's bytes, in one buffer of
// requestPool, and sends its answer's as they are.
type rawCodec struct{}

// request is an Export call's request as rawCodec reads it.
type request struct{ buf mem.Buffer }

// requestPool holds the buffers requests are read into: tiers from 256
// bytes to 4 MiB (the default maxRequestBytes), so that a request of 300
// KiB (1,000 records of 256 bytes) takes a buffer of 512 KiB rather than a
// new one per call; a larger request takes a buffer of its own size.
var requestPool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(8, 12, 14, 16, 17, 18, 19, 20, 21, 22)
	if err != nil {
		panic(err)
	}
	return p
}()

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("otlp source: cannot send a %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*request)
	if !ok {
		return fmt.Errorf("otlp source: cannot read into a %T", v)
	}
	p.buf = data.MaterializeToBuffer(requestPool)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// exportGRPC takes one Export call's request: one transaction.
func (s *Source) exportGRPC(ctx context.Context, body []byte) ([]byte, error) {
	defer panics.Guard("otlp source " + s.env.Name + ": gRPC call")
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil || !c.handled() {
		return nil, status.Error(codes.Canceled, "the call ended before it was handled")
	}
	defer c.finish()
	peerAddr := ""
	if p, ok := peer.FromContext(ctx); ok {
		peerAddr = p.Addr.String()
	}
	// The request now holds what its buffer really takes (a pool's buffer,
	// up to twice its size), not the most it could have been.
	c.hold.Shrink(max(0, c.hold.Bytes()-int64(cap(body))))
	acc, err := s.export(ctx, body, false, &c.hold, peerAddr)
	if err != nil {
		return nil, grpcError(s, err, peerAddr)
	}
	if acc.rejected == 0 {
		return []byte{}, nil // an ExportLogsServiceResponse with nothing in it
	}
	resp := plogotlp.NewExportResponse()
	ps := resp.PartialSuccess()
	ps.SetRejectedLogRecords(acc.rejected)
	ps.SetErrorMessage(acc.message)
	return resp.MarshalProto()
}

// grpcError is the status a handling error answers.
func grpcError(s *Source, err error, peerAddr string) error {
	var tl *tooLargeError
	var pe *putError
	var bad *badRequestError
	switch {
	case errors.As(err, &bad):
		s.counters.EventReadFail.Add(1)
		s.rejects.Add(reasonBadRequest, peerAddr, "err", err)
		return status.Error(codes.InvalidArgument, bad.Error())
	case errors.As(err, &tl):
		s.counters.EventReadFail.Add(1)
		s.rejects.Add(reasonTooLarge, peerAddr, "err", err)
		return status.Error(codes.ResourceExhausted, tl.Error())
	case errors.Is(err, errBusy):
		s.rejects.Add(reasonOverBudget, peerAddr, "maxBytesInFlight", s.maxInFlight)
		return retryStatus(codes.Unavailable, err.Error())
	case errors.As(err, &pe):
		return retryStatus(codes.Unavailable, pe.Error())
	}
	return retryStatus(codes.Unavailable, err.Error())
}

// retryStatus is a status with a RetryInfo asking for retryDelay, which
// makes OpenTelemetry exporters retry after that pause.
func retryStatus(code codes.Code, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay)})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}
