//go:build linux

package network

import (
	"fmt"
	"path/filepath"

	"warren/internal/netnsfile"
	"warren/internal/network/policy"
)

// StartWarm starts keeping Config.Warm routers ready. The daemon calls it
// once every sandbox of an earlier process was adopted at its slot and the
// rest swept.
func (n *Node) StartWarm() {
	n.pool.Start()
}

// makeWarm makes a router with the default policy for the pool.
func (n *Node) makeWarm() (*Sandbox, error) {
	s, err := n.register("", 0, policy.Policy{})
	if err != nil {
		return nil, err
	}
	if err := s.build(filepath.Join(n.dir, fmt.Sprintf("warm-%d", s.slot))); err != nil {
		return nil, err
	}
	return s, nil
}

// takeWarm takes a ready router for sandbox id, or returns nil when there
// is none: its namespace is bound again under id's name.
func (n *Node) takeWarm(id string) *Sandbox {
	n.mu.Lock()
	dup := n.byID[id] != nil
	n.mu.Unlock()
	if dup {
		return nil
	}
	s, ok := n.pool.Take()
	if !ok {
		return nil
	}
	path := filepath.Join(n.dir, id)
	if err := netnsfile.Rebind(s.nsPath, path); err != nil {
		n.log.Warn("take warm router", "err", err)
		s.destroy()
		return nil
	}
	n.mu.Lock()
	s.id, s.nsPath = id, path
	n.byID[id] = s
	n.mu.Unlock()
	return s
}
