package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"warren/api"
)

// TestNodeLease: a node's lease epoch counts up at each registration; a
// heartbeat with any other is refused as fenced, and so is every heartbeat
// once the node is fenced, until it registers again.
func TestNodeLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		t0 := time.Now()
		n := Node{ID: "n1", Addr: "10.0.0.1:7778", Region: "eu", Cluster: "eu-1", Labels: map[string]string{"gpu": "no"}, Report: []byte(`{"cpus":8}`)}
		first, err := s.RegisterNode(ctx, n, t0)
		if err != nil || first.Epoch != 1 || first.State != NodeActive || first.Labels["gpu"] != "no" {
			t.Fatalf("RegisterNode = %+v, %v", first, err)
		}
		if state, err := s.Heartbeat(ctx, "n1", 1, []byte(`{"cpus":8,"load":0.5}`), t0.Add(time.Second)); err != nil || state != NodeActive {
			t.Fatalf("Heartbeat: %v", err)
		}
		again, err := s.RegisterNode(ctx, n, t0.Add(2*time.Second))
		if err != nil || again.Epoch != 2 {
			t.Fatalf("RegisterNode again = %+v, %v; want epoch 2", again, err)
		}
		if _, err := s.Heartbeat(ctx, "n1", 1, nil, t0.Add(3*time.Second)); !errors.Is(err, ErrFenced) {
			t.Errorf("Heartbeat with the old epoch: %v, want ErrFenced", err)
		}
		if _, err := s.Heartbeat(ctx, "nobody", 1, nil, t0); !errors.Is(err, ErrFenced) {
			t.Errorf("Heartbeat of an unknown node: %v, want ErrFenced", err)
		}
		fenced, err := s.FenceStale(ctx, t0.Add(10*time.Second))
		if err != nil || len(fenced) != 1 || fenced[0].State != NodeFenced || fenced[0].Epoch != 3 {
			t.Fatalf("FenceStale = %+v, %v", fenced, err)
		}
		if _, err := s.Heartbeat(ctx, "n1", 3, nil, t0.Add(11*time.Second)); !errors.Is(err, ErrFenced) {
			t.Errorf("Heartbeat of a fenced node: %v, want ErrFenced", err)
		}
		if again, _ := s.FenceStale(ctx, t0.Add(time.Hour)); len(again) != 0 {
			t.Errorf("a fenced node was fenced again: %+v", again)
		}
		back, err := s.RegisterNode(ctx, n, t0.Add(12*time.Second))
		if err != nil || back.Epoch != 4 || back.State != NodeActive {
			t.Fatalf("RegisterNode after fencing = %+v, %v", back, err)
		}
		if _, err := s.Heartbeat(ctx, "n1", 4, nil, t0.Add(13*time.Second)); err != nil {
			t.Errorf("Heartbeat after registering again: %v", err)
		}
	})
}

// TestNodeStates: cordon and drain are moves from the states they allow,
// and outlive a node's restart; a move from the wrong state names it.
func TestNodeStates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		n := Node{ID: "n1", Addr: "10.0.0.1:7778"}
		if _, err := s.RegisterNode(ctx, n, time.Now()); err != nil {
			t.Fatal(err)
		}
		if rec, err := s.SetNodeState(ctx, "n1", []string{NodeActive}, NodeCordoned); err != nil || rec.State != NodeCordoned {
			t.Fatalf("cordon: %+v, %v", rec, err)
		}
		rec, err := s.RegisterNode(ctx, n, time.Now())
		if err != nil || rec.State != NodeCordoned {
			t.Errorf("a cordoned node restarting: %+v, %v; want it still cordoned", rec, err)
		}
		// Its heartbeat tells the node what it was made.
		if state, err := s.Heartbeat(ctx, "n1", rec.Epoch, nil, time.Now()); err != nil || state != NodeCordoned {
			t.Errorf("the heartbeat of a cordoned node: %q, %v", state, err)
		}
		if _, err := s.SetNodeState(ctx, "n1", []string{NodeActive}, NodeDraining); !errors.Is(err, ErrNodeState) {
			t.Errorf("drain from active of a cordoned node: %v, want ErrNodeState", err)
		}
		if _, err := s.SetNodeState(ctx, "n9", nil, NodeActive); !errors.Is(err, ErrNotFound) {
			t.Errorf("an unknown node: %v, want ErrNotFound", err)
		}
		nodes, err := s.ListNodes(ctx)
		if err != nil || len(nodes) != 1 || nodes[0].ID != "n1" {
			t.Errorf("ListNodes = %+v, %v", nodes, err)
		}
	})
}

// TestFenceStaleOnce: control replicas fencing at once fence each stale
// node exactly once between them, and never a live one.
func TestFenceStaleOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		t0 := time.Now()
		for _, id := range []string{"n1", "n2", "n3", "n4"} {
			if _, err := s.RegisterNode(ctx, Node{ID: id, Addr: id + ":1"}, t0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Heartbeat(ctx, "n4", 1, nil, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		count := map[string]int{}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				fenced, err := s.FenceStale(ctx, t0.Add(time.Second))
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, n := range fenced {
					count[n.ID]++
				}
			})
		}
		wg.Wait()
		if count["n1"] != 1 || count["n2"] != 1 || count["n3"] != 1 || count["n4"] != 0 {
			t.Errorf("fenced %v; want n1, n2 and n3 once each, n4 never", count)
		}
	})
}

// TestNodeSandboxes: a node's sandboxes are its own, and a single
// machine's sandboxes from before the fleet become the node's.
func TestNodeSandboxes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		for id, node := range map[string]string{"sb-a": "n1", "sb-b": "n2", "sb-old": ""} {
			sb := newSandbox(id, "acme")
			sb.Node = node
			if err := s.InsertSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := s.ClaimUnowned(ctx, "n1"); err != nil || n != 1 {
			t.Fatalf("ClaimUnowned = %d, %v; want 1", n, err)
		}
		got, err := s.NodeSandboxes(ctx, "n1", []string{api.StateStarting})
		if err != nil || len(got) != 2 || got[0].Node != "n1" || got[1].Node != "n1" {
			t.Errorf("NodeSandboxes(n1) = %+v, %v; want sb-a and sb-old", got, err)
		}
		if got, _ := s.NodeSandboxes(ctx, "n1", []string{api.StateStopped}); len(got) != 0 {
			t.Errorf("NodeSandboxes(n1, stopped) = %+v", got)
		}
	})
}
