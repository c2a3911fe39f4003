package e2e

import (
	"context"
	"strings"
	"testing"

	"warren/api"
)

// TestForkContainer: a fork of a running container sandbox starts children
// from its disk as it is now, under the parent's resources, each with an
// identity of its own; what one child writes no other sees, and the
// parent runs on untouched.
func TestForkContainer(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	parent, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
		Runtime: "container", MemoryMB: 192, TimeoutSeconds: 300, Env: map[string]string{"ROLE": "parent"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), parent.ID) })
	token := strings.TrimSpace(shared.sh(t, parent.ID, `head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' | tee /root/state`))

	res, err := c.Fork(ctx, parent.ID, api.ForkRequest{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sandboxes) != 3 || res.Snapshot.ID == "" || res.PausedMs <= 0 {
		t.Fatalf("fork = %+v; want 3 children, the snapshot and the pause", res)
	}
	t.Logf("the parent's writes waited %.1f ms for the fork", res.PausedMs)
	seen := map[string]bool{parent.ID: true}
	machineIDs := map[string]bool{shared.sh(t, parent.ID, `cat /etc/machine-id`): true}
	for _, kid := range res.Sandboxes {
		t.Cleanup(func() { c.DeleteSandbox(context.Background(), kid.ID) })
		if seen[kid.ID] || kid.Origin != res.Snapshot.ID || kid.MemoryMB != 192 || kid.State != api.StateRunning {
			t.Errorf("child %+v; want a new ID, running from %s with the parent's 192 MiB", kid, res.Snapshot.ID)
		}
		seen[kid.ID] = true
		// Each child has an identity of its own: hostname, /etc/hostname
		// and machine ID.
		got := shared.sh(t, kid.ID, `hostname; cat /etc/hostname; printenv ROLE; cat /root/state; echo; echo `+kid.ID+` > /root/mine`)
		if want := kid.ID + "\n" + kid.ID + "\nparent\n" + token + "\n"; got != want {
			t.Errorf("child %s: hostname, /etc/hostname, ROLE and the parent's file = %q, want %q", kid.ID, got, want)
		}
		machineID := shared.sh(t, kid.ID, `cat /etc/machine-id`)
		if machineIDs[machineID] || len(machineID) != 33 {
			t.Errorf("child %s: machine ID %q, want 32 hex digits of its own", kid.ID, machineID)
		}
		machineIDs[machineID] = true
	}
	for _, id := range []string{parent.ID, res.Sandboxes[0].ID} {
		got := shared.sh(t, id, `cat /root/state; echo; cat /root/mine 2>/dev/null || echo none`)
		want := token + "\n" + map[bool]string{true: "none", false: id}[id == parent.ID] + "\n"
		if got != want {
			t.Errorf("%s after the fork: %q, want %q (its own files only)", id, got, want)
		}
	}
}
