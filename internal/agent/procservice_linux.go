//go:build linux

package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	processpb "warren/internal/agent/pb/process"
	"warren/internal/agent/pb/process/processpbconnect"
)

// maxDataEvent bounds one DataEvent when queued chunks are merged.
const maxDataEvent = 256 << 10

// processService implements process.Process.
type processService struct{ s *Server }

var _ processpbconnect.ProcessHandler = processService{}

// List answers the running and recently ended processes, by pid.
func (h processService) List(ctx context.Context, req *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	procs := h.s.procs.all()
	slices.SortFunc(procs, func(a, b *proc) int { return cmp.Compare(a.pid, b.pid) })
	resp := &processpb.ListResponse{Processes: make([]*processpb.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		resp.Processes = append(resp.Processes, p.info())
	}
	return connect.NewResponse(resp), nil
}

// Start starts a process and streams its events; the process outlives the
// stream. A command that cannot be executed is answered as a process with
// pid 0 that ended with code 127 or 126 and a message on stderr.
//
// Unless stdin stays open (the caller goes on to use the process at once),
// the start event is held back for up to Options.StartHold: a process that
// ends within it is answered in one write.
func (h processService) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	}
	if err := setProcessUser(req.Header(), req.Msg.GetProcess()); err != nil {
		return err
	}
	p, sub, ns, err := h.s.startProcess(req.Msg, true)
	if err != nil {
		return err
	}
	gate := gateOf(ctx)
	if ns != nil {
		gate.hold()
		end := &processpb.ProcessEvent_EndEvent{ExitCode: ns.code, Exited: true, Status: fmt.Sprintf("exit status %d", ns.code)}
		for _, ev := range []*processpb.ProcessEvent{
			startEvent(0),
			dataEvent(streamStderr, []byte(ns.msg)),
			{Event: &processpb.ProcessEvent_End{End: end}},
		} {
			if err := send(ev); err != nil {
				return err
			}
		}
		return nil
	}
	defer p.out.unsubscribe(sub)
	if !req.Msg.GetStdin() {
		gate.hold()
	}
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	return h.s.pump(ctx, sub, send, gate)
}

// Connect streams the events of a started process, from now on or (replay)
// from the output kept since it started; the end comes last.
func (h processService) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	p, err := h.s.procs.get(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.out.subscribe(req.Msg.GetReplay())
	defer p.out.unsubscribe(sub)
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	}
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	return h.s.pump(ctx, sub, send, nil)
}

// Update resizes a process's pty (the kernel sends it SIGWINCH). A process
// without a pty answers FailedPrecondition; an update without pty changes
// nothing.
func (h processService) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	p, err := h.s.procs.get(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		if err := p.resize(req.Msg.GetPty().GetSize()); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

// StreamInput writes a client stream of input to a process's stdin, in
// order. The first message selects the process.
func (h processService) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			if p != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("start sent twice"))
			}
			found, err := h.s.procs.get(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *processpb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("data before start"))
			}
			if err := writeInput(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

// SendInput writes to a process's stdin.
func (h processService) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	p, err := h.s.procs.get(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

// writeInput writes input to a process. Input to a pty goes to its master,
// as typed on the terminal. Unlike envd, which refuses stdin input to a pty
// process, stdin input to one goes to the master too: the process has no
// other stdin, and warren's stdin route then serves terminals unchanged.
func writeInput(ctx context.Context, p *proc, in *processpb.ProcessInput) error {
	switch in := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		return p.writeStdin(ctx, in.Stdin)
	case *processpb.ProcessInput_Pty:
		if p.pty == nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process %d has no pty: send stdin input", p.pid))
		}
		return p.writeStdin(ctx, in.Pty)
	}
	return connect.NewError(connect.CodeInvalidArgument, errors.New("input is required"))
}

// SendSignal signals a process's group.
func (h processService) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	sig := int(req.Msg.GetSignal())
	if sig <= 0 || sig > 64 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bad signal %d", sig))
	}
	p, err := h.s.procs.get(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.signal(unix.Signal(sig)); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// CloseStdin closes a process's stdin once earlier input is written. It is
// idempotent. A pty process has no stdin to close: as envd does, it is
// refused (FailedPrecondition); input ^D (0x04) is the terminal's EOF.
func (h processService) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p, err := h.s.procs.get(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.pty != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d runs on a pty: its stdin cannot be closed; send ^D (0x04) as input instead", p.pid))
	}
	if err := p.lockStdin(ctx); err != nil {
		return nil, err
	}
	p.closeStdin()
	<-p.stdinSem
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// pump sends a subscriber's events until the end (nil), the caller leaving
// or the stream being cut, with a keep-alive after each silent KeepAlive.
// While gate holds flushes back (for at most Options.StartHold), what was
// sent waits for the next event; the end then goes out with the end of the
// stream.
func (s *Server) pump(ctx context.Context, sub *subscriber, send func(*processpb.ProcessEvent) error, gate *flushGate) error {
	wait := s.opts.KeepAlive
	if gate.holding() {
		wait = s.opts.StartHold
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for {
		evs, err := sub.next(ctx.Done(), idle.C)
		switch {
		case errors.Is(err, errTooSlow):
			return connect.NewError(connect.CodeResourceExhausted, err)
		case err != nil:
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		case evs == nil && gate.holding():
			gate.open(true)
			idle.Reset(s.opts.KeepAlive)
			continue
		case evs == nil:
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			idle.Reset(s.opts.KeepAlive)
			continue
		}
		for len(evs) > 0 {
			ev := evs[0]
			if ev.end != nil {
				return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: ev.end}})
			}
			gate.open(false)
			data, n := ev.data, 1
			if n < len(evs) && evs[n].end == nil && evs[n].stream == ev.stream {
				merged := slices.Clone(data)
				for ; n < len(evs) && evs[n].end == nil && evs[n].stream == ev.stream && len(merged)+len(evs[n].data) <= maxDataEvent; n++ {
					merged = append(merged, evs[n].data...)
				}
				data = merged
			}
			evs = evs[n:]
			if err := send(dataEvent(ev.stream, data)); err != nil {
				return err
			}
		}
		idle.Reset(s.opts.KeepAlive)
	}
}

func startEvent(pid uint32) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: pid}}}
}

func dataEvent(stream streamID, data []byte) *processpb.ProcessEvent {
	d := &processpb.ProcessEvent_DataEvent{}
	switch stream {
	case streamStderr:
		d.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: data}
	case streamPTY:
		d.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: data}
	default:
		d.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: data}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: d}}
}
