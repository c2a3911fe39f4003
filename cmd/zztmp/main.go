package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"warren/api"
	"warren/client"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:7799", "")
	keyf := flag.String("key", "/var/cache/warren-test/e2e-data/admin.key", "")
	n := flag.Int("n", 10, "")
	pause := flag.Duration("pause", 300*time.Millisecond, "")
	flag.Parse()
	k, _ := os.ReadFile(*keyf)
	c := client.New(*url, strings.TrimSpace(string(k)))
	ctx := context.Background()
	var cr, ex, tot []time.Duration
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			panic(err)
		}
		t1 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			panic(err)
		}
		t2 := time.Now()
		cr, ex, tot = append(cr, t1.Sub(t0)), append(ex, t2.Sub(t1)), append(tot, t2.Sub(t0))
		c.DeleteSandbox(ctx, sb.ID)
		time.Sleep(*pause)
	}
	for _, s := range []struct {
		n string
		d []time.Duration
	}{{"create", cr}, {"exec", ex}, {"total", tot}} {
		slices.Sort(s.d)
		fmt.Printf("%s p50 %v min %v max %v\n", s.n, s.d[len(s.d)/2], s.d[0], s.d[len(s.d)-1])
	}
}
