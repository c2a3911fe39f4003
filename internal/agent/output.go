package agent

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	processpb "warren/internal/agent/pb/process"
)

// Output of a process goes two ways: into a bounded replay log (for Connect
// with replay) and into the queue of every attached stream (Start, Connect).
//
// Bounds, per process and across the agent (outputMemory), so that no number
// of processes, streams or slow consumers can take the agent's memory:
//   - replay keeps the last replayLimit bytes of each stream, in at most
//     replayMaxChunks pieces per stream (output made of very many tiny writes
//     keeps less). While the replay logs of all running processes together
//     hold more than replayBudget, a process that writes keeps only the last
//     replayFloor bytes of its stream. Once a process has ended and is kept
//     only for later Connects, its replay log may be dropped to hold the
//     ended processes' total under endedOutputBudget.
//   - each attached stream holds, queued and in the batch being sent, at
//     most its share: queueBudget split among all the agent's attached
//     streams, between queueFloor and subscriberLimit. (Shares shrink as
//     streams attach; a stream over its new share takes nothing more until
//     it drains, so the streams' total stays under queueBudget times
//     1 + ln(streams).) When a stream is at its share, the pipe readers
//     wait for it to drain, so a merely slower consumer loses nothing and
//     slows the process down (as a terminal would); but they wait at most
//     stallTimeout. A stream still full then is cut off with
//     CodeResourceExhausted and the others go on: a stuck consumer can hold
//     the process's pipes for at most stallTimeout at a time, and cannot
//     make another consumer lose data.
//
// So the agent holds at most about replayBudget + endedOutputBudget +
// max(queueBudget × (1 + ln(streams)), streams × queueFloor) of output,
// whatever the sandbox runs: under 48 MiB for the 256 streams the daemon
// lets one sandbox have.
const (
	replayLimit       = 1 << 20
	replayMaxChunks   = 1 << 15
	replayBudget      = 8 << 20
	replayFloor       = 64 << 10
	coalesceLimit     = 32 << 10
	subscriberLimit   = 4 << 20
	queueBudget       = 4 << 20
	queueFloor        = 64 << 10
	stallTimeout      = 10 * time.Second
	eventOverhead     = 64 // accounted per queued event, so tiny writes count too
	endedOutputBudget = 8 << 20
)

// outputMemory is the agent-wide account of output held for running
// processes (see the bounds above). Its zero value is ready.
type outputMemory struct {
	replay  atomic.Int64 // bytes in the replay logs of running processes
	streams atomic.Int64 // attached streams
}

// share is how many bytes one attached stream may hold.
func (m *outputMemory) share() int {
	return min(subscriberLimit, max(queueFloor, queueBudget/int(max(1, m.streams.Load()))))
}

// replayCap is how many bytes of a stream a writing process keeps.
func (m *outputMemory) replayCap() int {
	if m.replay.Load() > replayBudget {
		return replayFloor
	}
	return replayLimit
}

// errTooSlow ends a stream whose consumer fell too far behind.
var errTooSlow = errors.New("stream consumer too slow: output dropped; reconnect with replay")

type streamID int8

const (
	streamStdout streamID = iota
	streamStderr
	streamPTY // a pty's master: the process's terminal output (pty_linux.go)
	numStreams
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

// push appends data with sequence number seq and trims the log to limit
// bytes; it extends the last chunk when that chunk was the latest output of
// any stream, so interleaving is kept.
func (r *ring) push(seq uint64, data []byte, limit int) {
	if n := len(r.chunks); n > r.head {
		last := &r.chunks[n-1]
		if last.seq == seq-1 && len(last.data)+len(data) <= coalesceLimit {
			last.data = append(last.data, data...)
			last.seq = seq
			r.bytes += len(data)
			r.trim(limit)
			return
		}
	}
	r.chunks = append(r.chunks, chunk{seq: seq, data: data})
	r.bytes += len(data)
	r.trim(limit)
}

func (r *ring) trim(limit int) {
	for r.bytes > limit || len(r.chunks)-r.head > replayMaxChunks {
		first := &r.chunks[r.head]
		if excess := r.bytes - limit; excess > 0 && excess < len(first.data) && len(r.chunks)-r.head <= replayMaxChunks {
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
	mem   *outputMemory // the agent's, shared by every process

	mu      sync.Mutex // guards the fields below
	drained *sync.Cond // on mu: a queue shrank, a stream left, or a stall timed out
	seq     uint64
	replay  [numStreams]ring
	subs    map[*subscriber]struct{}
	end     *processpb.ProcessEvent_EndEvent
	dropped bool // replay was dropped (forget)
}

// subscriber is one attached stream.
type subscriber struct {
	o        *output
	wake     chan struct{} // capacity 1: something was queued, or the stream was cut
	queue    []outEvent    // guarded by o.mu
	queued   int           // guarded by o.mu: accounted bytes in queue
	inflight int           // guarded by o.mu: accounted bytes of the batch being sent
	cut      bool          // guarded by o.mu: dropped for being too slow
}

func newOutput(mem *outputMemory) *output {
	o := &output{stall: stallTimeout, mem: mem, subs: make(map[*subscriber]struct{})}
	o.drained = sync.NewCond(&o.mu)
	return o
}

func (s *subscriber) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// held is what s holds against its share. o.mu must be held.
func (s *subscriber) held() int { return s.queued + s.inflight }

// publish records data (owned by the output from now on) of a stream and
// queues it to every attached stream. It may wait up to stallTimeout for a
// full queue to drain; see the bounds above.
func (o *output) publish(stream streamID, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var deadline time.Time
	for {
		if o.end != nil {
			return
		}
		share, full := o.mem.share(), false
		for s := range o.subs {
			if s.held() >= share {
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
				if s.held() >= share {
					s.cut = true
					o.detachLocked(s)
				}
			}
			break
		}
		o.drained.Wait()
	}
	o.seq++
	if !o.dropped {
		r := &o.replay[stream]
		before := r.bytes
		r.push(o.seq, data, o.mem.replayCap())
		o.mem.replay.Add(int64(r.bytes - before))
	}
	ev := outEvent{stream: stream, data: data}
	for s := range o.subs {
		s.queue = append(s.queue, ev)
		s.queued += len(data) + eventOverhead
		s.notify()
	}
}

// detachLocked removes an attached stream and what it holds. o.mu must be
// held.
func (o *output) detachLocked(s *subscriber) {
	if _, ok := o.subs[s]; ok {
		delete(o.subs, s)
		o.mem.streams.Add(-1)
	}
	s.queue = nil
	s.queued, s.inflight = 0, 0
	s.notify()
	o.drained.Broadcast()
}

// subscribe attaches a stream. With replay, the kept output comes first.
// When the process has ended already, the stream gets only the end after it.
func (o *output) subscribe(replay bool) *subscriber {
	s := &subscriber{o: o, wake: make(chan struct{}, 1)}
	o.mu.Lock()
	defer o.mu.Unlock()
	if replay {
		var live [numStreams][]chunk
		for i := range live {
			live[i] = o.replay[i].live()
		}
		for {
			next := -1
			for i, l := range live {
				if len(l) > 0 && (next < 0 || l[0].seq < live[next][0].seq) {
					next = i
				}
			}
			if next < 0 {
				break
			}
			s.queue = append(s.queue, outEvent{stream: streamID(next), data: live[next][0].data})
			live[next] = live[next][1:]
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
	o.mem.streams.Add(1)
	return s
}

// unsubscribe detaches a stream that stops reading.
func (o *output) unsubscribe(s *subscriber) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.detachLocked(s)
}

// finish queues the end to every attached stream and detaches them all;
// later publishes are dropped. The replay log stays, outside the running
// processes' budget.
func (o *output) finish(end *processpb.ProcessEvent_EndEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.end = end
	for s := range o.subs {
		s.queue = append(s.queue, outEvent{end: end})
		s.notify()
	}
	o.mem.streams.Add(-int64(len(o.subs)))
	clear(o.subs)
	o.mem.replay.Add(-int64(o.replayBytesLocked()))
	o.drained.Broadcast()
}

// forget drops the replay log of an ended process, returning how many bytes
// it held.
func (o *output) forget() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.replayBytesLocked()
	if o.end == nil {
		o.mem.replay.Add(-int64(n))
	}
	o.replay = [numStreams]ring{}
	o.dropped = true
	return n
}

// replayBytes is the size of the replay log.
func (o *output) replayBytes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.replayBytesLocked()
}

// replayBytesLocked is the size of the replay log. o.mu must be held.
func (o *output) replayBytesLocked() int {
	n := 0
	for _, r := range o.replay {
		n += r.bytes
	}
	return n
}

// next waits for queued events. It returns them (the last may be the end),
// or nil when idle fired first (time for a keep-alive), or errTooSlow when
// the stream was cut off, or the context's error. The batch it returns
// counts against the stream's share until the next call.
func (s *subscriber) next(done <-chan struct{}, idle <-chan time.Time) ([]outEvent, error) {
	for {
		s.o.mu.Lock()
		if s.inflight > 0 {
			s.inflight = 0
			s.o.drained.Broadcast()
		}
		if s.cut {
			s.o.mu.Unlock()
			return nil, errTooSlow
		}
		if len(s.queue) > 0 {
			evs := s.queue
			s.queue = nil
			s.inflight, s.queued = s.queued, 0
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
