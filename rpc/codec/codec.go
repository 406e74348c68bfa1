// Package codec bounds and validates what callers send a quorate gRPC
// server, before any handler sees it: the public port's and the peer
// port's servers both use it.
package codec

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/rpc/raftgrpc"
)

// PeerMaxMsgSize bounds the messages of the peer port's services (Raft and
// forwarding): room for raft's largest AppendEntries (256 entries of up to
// 1024 ops). Only nodes reach that port.
const PeerMaxMsgSize = 64 << 20

// Bounds are what a server accepts.
type Bounds struct {
	// Transport is the largest message the transport reads: the client
	// bound on the public port, PeerMaxMsgSize on the peer port. A larger
	// one is refused from its header, before it is read.
	Transport int
	// Client bounds a client's message (any but the peer services') where
	// the transport allows more.
	Client int
	// Items bounds a check's items, counted before it is decoded.
	Items int
	// Streams bounds the calls in progress on one connection.
	Streams uint32
}

// ServerOptions configure a server: static flow-control windows
// (raftgrpc), the transport's message bound, the per-connection
// concurrency bound, and the codec and interceptors that bound and
// validate what clients send.
func ServerOptions(b Bounds) []grpc.ServerOption {
	c := &serverCodec{proto: encoding.GetCodecV2("proto"), maxSize: b.Client, maxItems: b.Items}
	return append(raftgrpc.ServerOptions(),
		grpc.MaxRecvMsgSize(b.Transport),
		grpc.MaxConcurrentStreams(b.Streams),
		grpc.ForceServerCodecV2(c),
		grpc.ChainUnaryInterceptor(c.unary),
		grpc.ChainStreamInterceptor(c.stream),
	)
}

// serverCodec is the proto codec with the node's request bounds in front:
// a client's message larger than Bounds.Client (where the transport
// allows more: the peer port), or a check with more than Bounds.Items
// items, is refused before it is decoded.
//
// gRPC turns any error a codec returns into INTERNAL, but a message that
// does not decode (invalid UTF-8 in a string, broken wire format) is the
// caller's fault. So Unmarshal reports success, leaves the message empty
// and files the real status under the message; the interceptors, which
// run before any handler sees the message, return it.
type serverCodec struct {
	proto    encoding.CodecV2
	maxSize  int
	maxItems int
	bad      sync.Map // message (pointer) -> error, from Unmarshal to the interceptor
}

func (c *serverCodec) Name() string { return "proto" }

func (c *serverCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c *serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	peer := peerMessages[m.ProtoReflect().Descriptor().FullName()]
	if n := data.Len(); !peer && n > c.maxSize {
		c.bad.Store(v, status.Errorf(codes.ResourceExhausted, "message of %d bytes exceeds the maximum of %d (--max-recv-msg-size)", n, c.maxSize))
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if n := c.items(b, m); n > c.maxItems {
		c.bad.Store(v, status.Errorf(codes.InvalidArgument, "items: %d items exceed the maximum of %d per request", n, c.maxItems))
		return nil
	}
	if err := proto.Unmarshal(b, m); err != nil {
		proto.Reset(m)
		c.bad.Store(v, status.Errorf(codes.InvalidArgument, "malformed request: %v", err))
	}
	return nil
}

// items counts a check's items in its wire form, without decoding them.
func (c *serverCodec) items(b []byte, m proto.Message) int {
	switch m.(type) {
	case *pb.CheckRequest:
		return countField(b, 3) // items
	case *pb.CheckStreamRequest:
		return countField(field(b, 2), 3) // check.items
	}
	return 0
}

// countField counts the occurrences of field num at the top level of the
// wire-format message b, up to where b stops parsing (proto.Unmarshal
// reports that).
func countField(b []byte, num protowire.Number) int {
	count := 0
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return count
		}
		b = b[l:]
		if n == num {
			count++
		}
		if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
			return count
		}
		b = b[l:]
	}
	return count
}

// field returns the bytes of the last occurrence of length-delimited field
// num of b (proto merges repeated occurrences of a message field; the item
// count of the last one is a lower bound, which is all precheck needs).
func field(b []byte, num protowire.Number) []byte {
	var out []byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return out
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return out
			}
			out = v
			b = b[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
			return out
		}
		b = b[l:]
	}
	return out
}

// take returns, and forgets, the error Unmarshal filed for m.
func (c *serverCodec) take(m any) error {
	if err, ok := c.bad.LoadAndDelete(m); ok {
		return err.(error)
	}
	return nil
}

func (c *serverCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := c.take(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (c *serverCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, checkedStream{ServerStream: ss, c: c})
}

// checkedStream returns the codec's verdict on each message it receives.
type checkedStream struct {
	grpc.ServerStream
	c *serverCodec
}

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.c.take(m)
}

// peerMessages are the messages of the internal services, bounded by
// the transport's bound instead of the client bound.
var peerMessages = func() map[protoreflect.FullName]bool {
	m := map[protoreflect.FullName]bool{}
	for _, f := range []protoreflect.FileDescriptor{pb.File_rpc_quoratev1_raft_proto, pb.File_rpc_quoratev1_internal_proto} {
		for i := range f.Messages().Len() {
			m[f.Messages().Get(i).FullName()] = true
		}
	}
	return m
}()
