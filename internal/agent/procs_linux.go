//go:build linux

package agent

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	processpb "warren/internal/agent/pb/process"
)

// Ended processes are kept for Connect and List for endedTTL, at most
// endedMax of them (whichever is less); their replay logs together hold at
// most endedOutputBudget bytes, the oldest dropped first.
const (
	endedTTL = 10 * time.Minute
	endedMax = 256
)

// procTable holds the processes the agent started, running and recently
// ended.
type procTable struct {
	mu          sync.Mutex // guards the fields below
	byPID       map[uint32]*proc
	ended       []*proc // oldest first; each is also in byPID unless its pid was reused
	endedOutput int     // replay bytes held by the ended processes
}

func newProcTable() *procTable {
	return &procTable{byPID: make(map[uint32]*proc)}
}

// add registers a started process. A kept ended process with the same
// (reused) pid is shadowed.
func (t *procTable) add(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byPID[p.pid] = p
}

// markEnded moves p to the kept ended processes.
func (t *procTable) markEnded(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = append(t.ended, p)
	t.endedOutput += p.out.replayBytes()
	t.pruneLocked(time.Now())
}

// pruneLocked forgets ended processes past the retention limits. t.mu must
// be held.
func (t *procTable) pruneLocked(now time.Time) {
	n := 0
	for n < len(t.ended) && (len(t.ended)-n > endedMax || now.Sub(t.ended[n].endedAtTime()) > endedTTL) {
		p := t.ended[n]
		t.endedOutput -= p.out.forget()
		if t.byPID[p.pid] == p {
			delete(t.byPID, p.pid)
		}
		p.release()
		n++
	}
	if n > 0 {
		clear(t.ended[:n])
		t.ended = t.ended[n:]
	}
	for i := 0; t.endedOutput > endedOutputBudget && i < len(t.ended); i++ {
		t.endedOutput -= t.ended[i].out.forget()
	}
}

// get finds the process a selector names: by pid, or by tag (the running
// process with the tag, else the one that ended last).
func (t *procTable) get(sel *processpb.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	switch s := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		if p, ok := t.byPID[s.Pid]; ok {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d not found", s.Pid))
	case *processpb.ProcessSelector_Tag:
		var best *proc
		for _, p := range t.byPID {
			if p.tag == nil || *p.tag != s.Tag {
				continue
			}
			if best == nil || betterTagMatch(p, best) {
				best = p
			}
		}
		if best == nil {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no process with tag %q", s.Tag))
		}
		return best, nil
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector is required"))
}

// betterTagMatch prefers a running process, then the one that ended last.
func betterTagMatch(p, than *proc) bool {
	pe, te := p.endedAtTime(), than.endedAtTime()
	switch {
	case pe.IsZero() != te.IsZero():
		return pe.IsZero()
	case pe.IsZero():
		return p.started.After(than.started)
	}
	return pe.After(te)
}

// runningTag reports whether a running process has the tag.
func (t *procTable) runningTag(tag string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.byPID {
		if p.tag != nil && *p.tag == tag && p.endedAtTime().IsZero() {
			return true
		}
	}
	return false
}

// all lists the processes, running and kept.
func (t *procTable) all() []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	out := make([]*proc, 0, len(t.byPID))
	for _, p := range t.byPID {
		out = append(out, p)
	}
	return out
}

// running lists the processes that have not ended.
func (t *procTable) running() []*proc {
	var out []*proc
	for _, p := range t.all() {
		if p.endedAtTime().IsZero() {
			out = append(out, p)
		}
	}
	return out
}

// releaseAll forgets every process; the server is closing.
func (t *procTable) releaseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.byPID {
		p.release()
	}
	for _, p := range t.ended {
		p.release()
	}
	clear(t.byPID)
	t.ended = nil
}

func (p *proc) endedAtTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endedAt
}
