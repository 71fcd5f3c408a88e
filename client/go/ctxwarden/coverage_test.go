package ctxwarden_test

// The helpers of package ctxwarden that wrap an RPC can express every field
// of its request.
//
// The test walks the ContextService descriptor. Every RPC must be classified
// below: wrapped by which helper(s), or called through the generated client
// directly; an RPC the lists do not name (a new one) fails, and so does a
// name that is no longer an RPC. Each helper is then used to send a request
// with a non-default value in every field (once per member of each oneof the
// helper can send, and with each proto3 optional field set and unset) to a
// recording gRPC server on a loopback socket, which must receive those
// values: a field the helper cannot pass on fails, unless the helper's
// exemption list names it and says why the helper owns it.

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// helper is a function of package ctxwarden that wraps an RPC.
type helper struct {
	name string
	rpc  string
	// Request fields the helper sets itself, each with the reason; every
	// other field must reach the server as the caller gave it.
	exempt map[string]string
	// oneof name -> the only member the helper sends (others are other helpers').
	only map[string]string
	// call uses the helper to send req (every field set) through client.
	call func(ctx context.Context, client ctxwardenv1.ContextServiceClient, req proto.Message) error
}

var helpers = []helper{
	{
		name: "InputCache.Build",
		rpc:  "BuildModelInput",
		exempt: map[string]string{
			// The cache owns the token: it sends the held input's, so that it
			// can complete the answer (messages_offset, rendered_prefix_bytes).
			"resume_token": "sent from the held input",
		},
		call: func(ctx context.Context, client ctxwardenv1.ContextServiceClient, req proto.Message) error {
			_, err := ctxwarden.NewInputCache(0).Build(ctx, client, req.(*ctxwardenv1.BuildModelInputRequest))
			return err
		},
	},
	{
		// ModelOutput builds the request from its arguments; the caller sets
		// the optional fields on the request it returns, as below.
		name: "ModelOutput",
		rpc:  "AppendModelOutput",
		only: map[string]string{"output": "response_json"},
		call: func(ctx context.Context, client ctxwardenv1.ContextServiceClient, req proto.Message) error {
			want := req.(*ctxwardenv1.AppendModelOutputRequest)
			r := ctxwarden.ModelOutput(want.GetSessionId(), want.GetFormat(), []byte(want.GetResponseJson()))
			setAppendOptions(r, want)
			_, err := client.AppendModelOutput(ctx, r)
			return err
		},
	},
	{
		name: "ModelItems",
		rpc:  "AppendModelOutput",
		only: map[string]string{"output": "items_json"},
		call: func(ctx context.Context, client ctxwardenv1.ContextServiceClient, req proto.Message) error {
			want := req.(*ctxwardenv1.AppendModelOutputRequest)
			r := ctxwarden.ModelItems(want.GetSessionId(), want.GetFormat(), []byte(want.GetItemsJson()))
			setAppendOptions(r, want)
			_, err := client.AppendModelOutput(ctx, r)
			return err
		},
	},
}

// setAppendOptions sets what ModelOutput and ModelItems leave to the caller.
func setAppendOptions(r, from *ctxwardenv1.AppendModelOutputRequest) {
	r.RequestId = from.RequestId
	r.ExpectedLastSeq = from.ExpectedLastSeq
	r.View = from.View
}

// directRPCs are wrapped by no helper: callers use the generated client's
// method (Client embeds it), which takes the request as the descriptor has
// it, every field included. (The wrapped ones can be called that way too;
// they are listed with their helpers, not here.)
var directRPCs = map[string]bool{
	"CreateSession":     true,
	"GetSession":        true,
	"ListSessions":      true,
	"UpdateSession":     true,
	"DeleteSession":     true,
	"AppendMessages":    true,
	"StreamMessages":    true,
	"ListMessages":      true,
	"RollbackTurn":      true,
	"Compact":           true,
	"PrepareCompaction": true,
	"CommitCompaction":  true,
	"ListCompactions":   true,
	"GetToolOutput":     true,
	"CountTokens":       true,
	"ForkSession":       true,
	"ArchiveSession":    true,
	"UnarchiveSession":  true,
	"GetUsage":          true,
	"CreateMemory":      true,
	"GetMemory":         true,
	"ListMemories":      true,
	"UpdateMemory":      true,
	"DeleteMemory":      true,
}

func contextService(t *testing.T) protoreflect.ServiceDescriptor {
	t.Helper()
	svc := ctxwardenv1.File_ctxwarden_v1_context_service_proto.Services().ByName("ContextService")
	if svc == nil {
		t.Fatal("no ContextService in the generated descriptor")
	}
	return svc
}

func TestEveryRPCIsClassified(t *testing.T) {
	methods := contextService(t).Methods()
	wrapped := map[string]bool{}
	for _, h := range helpers {
		wrapped[h.rpc] = true
	}
	for i := 0; i < methods.Len(); i++ {
		name := string(methods.Get(i).Name())
		switch {
		case wrapped[name] && directRPCs[name]:
			t.Errorf("%s is both wrapped by a helper and in directRPCs: keep it with its helpers only", name)
		case !wrapped[name] && !directRPCs[name]:
			t.Errorf("new RPC %s: add its helper to helpers, or add it to directRPCs", name)
		}
	}
	for name := range directRPCs {
		if methods.ByName(protoreflect.Name(name)) == nil {
			t.Errorf("directRPCs names %s, which is no RPC of ContextService", name)
		}
	}
	for name := range wrapped {
		if methods.ByName(protoreflect.Name(name)) == nil {
			t.Errorf("helpers wrap %s, which is no RPC of ContextService", name)
		}
	}
}

func TestHelpersExpressEveryRequestField(t *testing.T) {
	svc := contextService(t)
	rec := startRecorder(t, svc)
	c := dial(t, rec.target, ctxwarden.WithServiceConfig(""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, h := range helpers {
		h := h
		t.Run(h.name, func(t *testing.T) {
			md := svc.Methods().ByName(protoreflect.Name(h.rpc))
			if md == nil {
				t.Fatalf("%s is no RPC of ContextService", h.rpc)
			}
			in := md.Input()
			for name := range h.exempt {
				if in.Fields().ByName(protoreflect.Name(name)) == nil {
					t.Errorf("exempt field %s: %s has no such field", name, in.FullName())
				}
			}
			for name, member := range h.only {
				if o := in.Oneofs().ByName(protoreflect.Name(name)); o == nil || o.Fields().ByName(protoreflect.Name(member)) == nil {
					t.Errorf("only %s=%s: %s has no such oneof member", name, member, in.FullName())
				}
			}
			for _, req := range variants(t, in, h.only) {
				rec.take()
				if err := h.call(ctx, c, proto.Clone(req)); err != nil {
					t.Fatalf("%s: %v", h.name, err)
				}
				got := rec.take()
				if len(got) == 0 {
					t.Fatalf("%s sent no request", h.name)
				}
				for _, r := range got {
					if r.rpc != h.rpc {
						t.Errorf("%s sent %s, want only %s", h.name, r.rpc, h.rpc)
						continue
					}
					want, have := proto.Clone(req), proto.Clone(r.request)
					for name := range h.exempt {
						fd := in.Fields().ByName(protoreflect.Name(name))
						want.ProtoReflect().Clear(fd)
						have.ProtoReflect().Clear(fd)
					}
					if !proto.Equal(want, have) {
						t.Errorf("%s: the server received\n%v\ninstead of\n%v\n(a field the helper does not pass on? "+
							"make it expressible, or exempt it with a reason)", h.name, have, want)
					}
				}
			}
		})
	}
}

// -- sample values ---------------------------------------------------------------

func scalarSample(fd protoreflect.FieldDescriptor) protoreflect.Value {
	n := int64(7 + fd.Number())
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(fd.Name()) + "-1")
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{1, 2, 3})
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		return protoreflect.ValueOfEnum(values.Get(values.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(n)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1.5)
	}
	panic("no sample for " + string(fd.FullName()))
}

// messageSample fills the scalar fields (outside oneofs) of m, one level deep.
func messageSample(m protoreflect.Message) protoreflect.Value {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Cardinality() == protoreflect.Repeated || fd.Message() != nil || fd.ContainingOneof() != nil {
			continue
		}
		m.Set(fd, scalarSample(fd))
	}
	return protoreflect.ValueOfMessage(m)
}

// setSample sets fd of m to a non-default value.
func setSample(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		v := mp.NewValue()
		if fd.MapValue().Message() != nil {
			messageSample(v.Message())
		} else {
			v = scalarSample(fd.MapValue())
		}
		mp.Set(scalarSample(fd.MapKey()).MapKey(), v)
	case fd.IsList():
		l := m.Mutable(fd).List()
		if fd.Message() != nil {
			l.Append(messageSample(l.NewElement().Message()))
		} else {
			l.Append(scalarSample(fd))
		}
	case fd.Message() != nil:
		m.Set(fd, messageSample(m.NewField(fd).Message()))
	default:
		m.Set(fd, scalarSample(fd))
	}
}

// variants returns requests of type md with every field set: one per member
// of each oneof (only the member named in only, where it names one), each
// proto3 optional field set and unset.
func variants(t *testing.T, md protoreflect.MessageDescriptor, only map[string]string) []proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatal(err)
	}
	out := []protoreflect.Message{mt.New()}
	expand := func(options ...func(protoreflect.Message)) {
		var next []protoreflect.Message
		for _, m := range out {
			for _, apply := range options {
				c := proto.Clone(m.Interface()).ProtoReflect()
				apply(c)
				next = append(next, c)
			}
		}
		out = next
	}
	fields := md.Fields()
	done := map[protoreflect.Name]bool{} // real oneofs already expanded
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		o := fd.ContainingOneof()
		switch {
		case o != nil && !o.IsSynthetic():
			if done[o.Name()] {
				continue
			}
			done[o.Name()] = true
			var options []func(protoreflect.Message)
			for j := 0; j < o.Fields().Len(); j++ {
				member := o.Fields().Get(j)
				if want, ok := only[string(o.Name())]; ok && want != string(member.Name()) {
					continue
				}
				options = append(options, func(m protoreflect.Message) { setSample(m, member) })
			}
			expand(options...)
		case o != nil: // proto3 optional: set and unset
			expand(func(m protoreflect.Message) { setSample(m, fd) }, func(protoreflect.Message) {})
		default:
			expand(func(m protoreflect.Message) { setSample(m, fd) })
		}
	}
	reqs := make([]proto.Message, len(out))
	for i, m := range out {
		reqs[i] = m.Interface()
	}
	return reqs
}

// -- a gRPC server that records every request ------------------------------------

type recorded struct {
	rpc     string
	request proto.Message
}

type recorder struct {
	target string
	mu     sync.Mutex
	got    []recorded
}

func (r *recorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// startRecorder serves every RPC of svc on a loopback port: it records each
// request and answers with an empty response (no next page, nothing resumed).
func startRecorder(t *testing.T, svc protoreflect.ServiceDescriptor) *recorder {
	t.Helper()
	r := &recorder{}
	handler := func(_ interface{}, stream grpc.ServerStream) error {
		full, _ := grpc.MethodFromServerStream(stream)
		md := svc.Methods().ByName(protoreflect.Name(full[strings.LastIndex(full, "/")+1:]))
		if md == nil {
			t.Errorf("the recording server got a call of %s", full)
			return io.EOF
		}
		in, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			return err
		}
		out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		if err != nil {
			return err
		}
		for {
			req := in.New().Interface()
			if err := stream.RecvMsg(req); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			r.mu.Lock()
			r.got = append(r.got, recorded{rpc: string(md.Name()), request: req})
			r.mu.Unlock()
			if err := stream.SendMsg(out.New().Interface()); err != nil {
				return err
			}
			if !md.IsStreamingClient() {
				return nil
			}
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(handler))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	r.target = lis.Addr().String()
	return r
}
