package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// BenchmarkTransition is one compare-and-set move of a sandbox (running ↔
// paused, at the version it read), with the record read back: the write
// every lifecycle call makes.
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/store/
func BenchmarkTransition(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s, _ := openTest(b, be)
			ctx := context.Background()
			if err := s.InsertSandbox(ctx, newSandbox("sb-1", "acme")); err != nil {
				b.Fatal(err)
			}
			sb, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateRunning})
			if err != nil {
				b.Fatal(err)
			}
			state := []byte(`{"pid":4242,"start":123456789,"socket":"/var/lib/warren/sandboxes/sb-1/agent.sock"}`)
			for b.Loop() {
				to := api.StatePaused
				if sb.State == api.StatePaused {
					to = api.StateRunning
				}
				sb, err = s.Transition(ctx, "sb-1", Transition{From: []string{sb.State}, To: to, Version: sb.Version, RuntimeState: state})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListSandboxes is one page of 100 of a tenant's 1000 sandboxes
// (among 2000), from the middle of the list: a keyset page through the
// (tenant, created_at) index.
func BenchmarkListSandboxes(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s, _ := openTest(b, be)
			ctx := context.Background()
			base := time.Now()
			for i := range 2000 {
				sb := newSandbox(fmt.Sprintf("sb-%04d", i), []string{"acme", "other"}[i%2])
				sb.State = api.StateRunning
				sb.CreatedAt = base.Add(time.Duration(i) * time.Millisecond)
				sb.Env = map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/root"}
				sb.Metadata = map[string]string{"run": fmt.Sprint(i)}
				if err := s.InsertSandbox(ctx, sb); err != nil {
					b.Fatal(err)
				}
			}
			page := listing.Page{Limit: 100, After: listing.Cursor{CreatedAt: base.Add(1000 * time.Millisecond).UTC(), ID: "sb-1000"}}
			for b.Loop() {
				list, err := s.ListSandboxes(ctx, "acme", nil, page)
				if err != nil || len(list) != 100 {
					b.Fatalf("ListSandboxes = %d sandboxes, %v", len(list), err)
				}
			}
		})
	}
}
