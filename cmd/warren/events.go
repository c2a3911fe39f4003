package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"warren/api"
)

func runEvents(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("events", "[flags]",
		"Print the events of your sandboxes and snapshots as they happen, one a line (ID, time, kind, sandbox, snapshot, state, reason), until interrupted. A cut stream is followed again from the last event printed.")
	sandbox := fs.String("sandbox", "", "only the events of this sandbox")
	snapshot := fs.String("snapshot", "", "only the events of this snapshot")
	kind := fs.String("kind", "", "only these kinds, comma-separated: e.g. sandbox.failed,snapshot (a family stands for all its kinds)")
	after := fs.String("after", "", "start after the event with this ID (0: every event the server still holds) instead of with the next one")
	allTenants := fs.Bool("all-tenants", false, "every tenant's events and the fleet's nodes' (admin key only)")
	asJSON := fs.Bool("json", false, "print each event as a line of JSON")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	kinds, err := api.ParseEventKinds(*kind)
	if err != nil {
		return badUsage(fs, err.Error())
	}
	req := api.EventsRequest{Sandbox: *sandbox, Snapshot: *snapshot, Kinds: kinds, AllTenants: *allTenants}
	if *after != "" {
		n, err := strconv.ParseInt(*after, 10, 64)
		if err != nil || n < 0 {
			return badUsage(fs, fmt.Sprintf("bad --after %q: want an event ID", *after))
		}
		req.After = &n
	}
	enc := json.NewEncoder(c.stdout)
	err = cl.Events(ctx, req, func(e api.Event) error {
		if *asJSON {
			return enc.Encode(e)
		}
		if e.Kind == api.EventsLost {
			_, err := fmt.Fprintf(c.stderr, "warren: %s\n", e.Reason)
			return err
		}
		_, err := fmt.Fprintf(c.stdout, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At.Local().Format(time.StampMilli), e.Kind,
			cmp.Or(e.Sandbox, "-"), cmp.Or(e.Snapshot, "-"), cmp.Or(e.State, "-"), e.Reason)
		return err
	})
	if errors.Is(err, context.Canceled) {
		return nil // interrupted: the usual end
	}
	return err
}
