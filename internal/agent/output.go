package agent

import (
	"errors"
	"sync"
	"time"

	processpb "warren/internal/agent/pb/process"
)

// Output of a process goes two ways: into a bounded replay log (for Connect
// with replay) and into the queue of every attached stream (Start, Connect).
//
// Bounds, all per process:
//   - replay keeps the last replayLimit bytes of each stream, in at most
//     replayMaxChunks pieces per stream (output made of very many tiny writes
//     keeps less). Once a process has ended and is kept only for later
//     Connects, its replay log may be dropped to hold the agent's total under
//     endedOutputBudget.
//   - each attached stream queues at most subscriberLimit bytes (plus one
//     batch being sent). When a stream's queue is full, the pipe readers wait
//     for it to drain, so a merely slower consumer loses nothing and slows the
//     process down (as a terminal would); but they wait at most stallTimeout.
//     A stream still full then is cut off with CodeResourceExhausted and the
//     others go on: a stuck consumer can hold the process's pipes for at most
//     stallTimeout at a time, and cannot make another consumer lose data.
const (
	replayLimit       = 1 << 20
	replayMaxChunks   = 1 << 15
	coalesceLimit     = 32 << 10
	subscriberLimit   = 4 << 20
	stallTimeout      = 10 * time.Second
	eventOverhead     = 64 // accounted per queued event, so tiny writes count too
	endedOutputBudget = 64 << 20
)

// errTooSlow ends a stream whose consumer fell too far behind.
var errTooSlow = errors.New("stream consumer too slow: output dropped; reconnect with replay")

type streamID int8

const (
	streamStdout streamID = iota
	streamStderr
)

// outEvent is one queued event of a stream: data of a stream, or the end.
type outEvent struct {
	stream streamID
	data   []byte
	end    *processpb.ProcessEvent_EndEvent
}

type chunk struct {
	seq  uint64
	data []byte
}

// ring is the replay log of one stream: chunks in order, oldest dropped.
type ring struct {
	chunks []chunk
	head   int // chunks[:head] are dropped
	bytes  int
}

func (r *ring) live() []chunk { return r.chunks[r.head:] }

// push appends data with sequence number seq; it extends the last chunk when
// that chunk was the latest output of any stream, so interleaving is kept.
func (r *ring) push(seq uint64, data []byte) {
	if n := len(r.chunks); n > r.head {
		last := &r.chunks[n-1]
		if last.seq == seq-1 && len(last.data)+len(data) <= coalesceLimit {
			last.data = append(last.data, data...)
			last.seq = seq
			r.bytes += len(data)
			r.trim()
			return
		}
	}
	r.chunks = append(r.chunks, chunk{seq: seq, data: data})
	r.bytes += len(data)
	r.trim()
}

func (r *ring) trim() {
	for r.bytes > replayLimit || len(r.chunks)-r.head > replayMaxChunks {
		first := &r.chunks[r.head]
		if excess := r.bytes - replayLimit; excess > 0 && excess < len(first.data) && len(r.chunks)-r.head <= replayMaxChunks {
			first.data = first.data[excess:]
			r.bytes -= excess
			break
		}
		r.bytes -= len(first.data)
		*first = chunk{}
		r.head++
	}
	if r.head > 64 && r.head*2 > len(r.chunks) {
		n := copy(r.chunks, r.chunks[r.head:])
		clear(r.chunks[n:])
		r.chunks = r.chunks[:n]
		r.head = 0
	}
}

// output is the event hub of one process.
type output struct {
	stall time.Duration // stallTimeout; shorter in tests

	mu      sync.Mutex // guards the fields below
	drained *sync.Cond // on mu: a queue shrank, a stream left, or a stall timed out
	seq     uint64
	replay  [2]ring
	subs    map[*subscriber]struct{}
	end     *processpb.ProcessEvent_EndEvent
	dropped bool // replay was dropped (forget)
}

// subscriber is one attached stream.
type subscriber struct {
	o      *output
	wake   chan struct{} // capacity 1: something was queued, or the stream was cut
	queue  []outEvent    // guarded by o.mu
	queued int           // guarded by o.mu: accounted bytes in queue
	cut    bool          // guarded by o.mu: dropped for being too slow
}

func newOutput() *output {
	o := &output{stall: stallTimeout, subs: make(map[*subscriber]struct{})}
	o.drained = sync.NewCond(&o.mu)
	return o
}

func (s *subscriber) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// publish records data (owned by the output from now on) of a stream and
// queues it to every attached stream. It may wait up to stallTimeout for a
// full queue to drain; see the bounds above.
func (o *output) publish(stream streamID, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.end != nil {
		return
	}
	var deadline time.Time
	for {
		full := false
		for s := range o.subs {
			if s.queued >= subscriberLimit {
				full = true
				break
			}
		}
		if !full {
			break
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(o.stall)
			t := time.AfterFunc(o.stall, func() {
				o.mu.Lock()
				o.drained.Broadcast()
				o.mu.Unlock()
			})
			defer t.Stop()
		}
		if !now.Before(deadline) {
			for s := range o.subs {
				if s.queued >= subscriberLimit {
					o.cutLocked(s)
				}
			}
			break
		}
		o.drained.Wait()
	}
	o.seq++
	if !o.dropped {
		o.replay[stream].push(o.seq, data)
	}
	ev := outEvent{stream: stream, data: data}
	for s := range o.subs {
		s.queue = append(s.queue, ev)
		s.queued += len(data) + eventOverhead
		s.notify()
	}
}

func (o *output) cutLocked(s *subscriber) {
	s.cut = true
	s.queue = nil
	s.queued = 0
	delete(o.subs, s)
	s.notify()
}

// subscribe attaches a stream. With replay, the kept output comes first.
// When the process has ended already, the stream gets only the end after it.
func (o *output) subscribe(replay bool) *subscriber {
	s := &subscriber{o: o, wake: make(chan struct{}, 1)}
	o.mu.Lock()
	defer o.mu.Unlock()
	if replay {
		out, errs := o.replay[streamStdout].live(), o.replay[streamStderr].live()
		for len(out) > 0 || len(errs) > 0 {
			if len(errs) == 0 || (len(out) > 0 && out[0].seq < errs[0].seq) {
				s.queue = append(s.queue, outEvent{stream: streamStdout, data: out[0].data})
				out = out[1:]
			} else {
				s.queue = append(s.queue, outEvent{stream: streamStderr, data: errs[0].data})
				errs = errs[1:]
			}
		}
	}
	if o.end != nil {
		s.queue = append(s.queue, outEvent{end: o.end})
		return s
	}
	for _, ev := range s.queue {
		s.queued += len(ev.data) + eventOverhead
	}
	o.subs[s] = struct{}{}
	return s
}

// unsubscribe detaches a stream that stops reading.
func (o *output) unsubscribe(s *subscriber) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.subs, s)
	s.queue = nil
	s.queued = 0
	o.drained.Broadcast()
}

// finish queues the end to every attached stream and detaches them all;
// later publishes are dropped.
func (o *output) finish(end *processpb.ProcessEvent_EndEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.end = end
	for s := range o.subs {
		s.queue = append(s.queue, outEvent{end: end})
		s.notify()
	}
	clear(o.subs)
	o.drained.Broadcast()
}

// forget drops the replay log, returning how many bytes it held.
func (o *output) forget() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.replay[0].bytes + o.replay[1].bytes
	o.replay = [2]ring{}
	o.dropped = true
	return n
}

// replayBytes is the size of the replay log.
func (o *output) replayBytes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.replay[0].bytes + o.replay[1].bytes
}

// next waits for queued events. It returns them (the last may be the end),
// or nil when idle fired first (time for a keep-alive), or errTooSlow when
// the stream was cut off, or the context's error.
func (s *subscriber) next(done <-chan struct{}, idle <-chan time.Time) ([]outEvent, error) {
	for {
		s.o.mu.Lock()
		if s.cut {
			s.o.mu.Unlock()
			return nil, errTooSlow
		}
		if len(s.queue) > 0 {
			evs := s.queue
			s.queue = nil
			s.queued = 0
			s.o.drained.Broadcast()
			s.o.mu.Unlock()
			return evs, nil
		}
		s.o.mu.Unlock()
		select {
		case <-s.wake:
		case <-done:
			return nil, errStreamDone
		case <-idle:
			return nil, nil
		}
	}
}

// errStreamDone is returned by next when the caller went away.
var errStreamDone = errors.New("stream done")
