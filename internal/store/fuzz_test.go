package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"warren/api"
)

// rowFunc is a scanner whose Scan is a function.
type rowFunc func(dest ...any) error

func (f rowFunc) Scan(dest ...any) error { return f(dest...) }

// storedRow is a sandboxes row as the database holds it.
type storedRow struct {
	env, meta          string
	created, updated   int64
	expires            sql.NullInt64
	runtimeState       []byte
	id, tenant, status string
}

// scan serves the row to scanSandbox in sandboxColumns order.
func (r storedRow) scan(dest ...any) error {
	if len(dest) != 35 {
		return fmt.Errorf("scan of %d columns, want 35", len(dest))
	}
	*dest[0].(*string), *dest[1].(*string), *dest[4].(*string) = r.id, r.tenant, r.status
	*dest[10].(*string), *dest[11].(*string) = r.env, r.meta
	*dest[15].(*string) = `{}`
	*dest[17].(*string), *dest[18].(*bool) = fuzzPreviewToken, true
	*dest[19].(*[]byte) = r.runtimeState
	*dest[20].(*int64), *dest[22].(*int64) = r.created, r.updated
	*dest[21].(*sql.NullInt64) = r.expires
	*dest[23].(*int64) = 1
	*dest[24].(*string) = "n1"
	// No checkpoint policy, checkpoint, restore, agent token, template
	// version, persistence, lifecycle, pause or standby: dest[25:35] keep
	// their zero values, which stand for none.
	return nil
}

// fuzzPreviewToken is the preview token of every row storedRow serves.
const fuzzPreviewToken = "0123456789abcdef"

// FuzzScanSandbox feeds scanSandbox arbitrary stored env and metadata JSON
// and timestamps. It never panics; it refuses exactly the JSON that is
// neither null nor an object of strings; what it reads back stores again
// (encodeMaps, nullNanos) as the same row, and decodes from that to the
// same maps; its times are UTC and keep every nanosecond.
func FuzzScanSandbox(f *testing.F) {
	f.Add(`{"PATH":"/bin","A":""}`, `null`, int64(1_700_000_000_123_456_789), int64(0), false, int64(1))
	f.Add(`null`, `{"owner":"me"}`, int64(0), int64(1_800_000_000_000_000_000), true, int64(-1))
	f.Add(`{}`, `{}`, int64(math.MinInt64), int64(math.MaxInt64), true, int64(math.MaxInt64))
	f.Add(`{"a":"\u0000\ud800"}`, `{"":"x"}`, int64(-1), int64(0), true, int64(0))
	f.Add(`{"a":1}`, `null`, int64(0), int64(0), false, int64(0))
	f.Add(`[]`, `null`, int64(0), int64(0), false, int64(0))
	f.Add(``, `null`, int64(0), int64(0), false, int64(0))
	f.Add(`{"a":"b"} trailing`, `null`, int64(0), int64(0), false, int64(0))
	f.Add(`{"a":"b","a":"c"}`, `{"k":null}`, int64(0), int64(0), false, int64(0))
	f.Fuzz(func(t *testing.T, env, meta string, created, expires int64, expiresSet bool, updated int64) {
		row := storedRow{
			id: "sb-fuzz", tenant: "t", status: api.StateRunning, env: env, meta: meta,
			created: created, updated: updated, expires: sql.NullInt64{Int64: expires, Valid: expiresSet},
			runtimeState: []byte(`{"pid":1}`),
		}
		sb, err := scanSandbox(rowFunc(row.scan))
		envOK, metaOK := stringMap(env), stringMap(meta)
		if err != nil {
			if envOK && metaOK {
				t.Fatalf("env %q, metadata %q: refused: %v", env, meta, err)
			}
			if !strings.Contains(err.Error(), row.id) {
				t.Fatalf("env %q, metadata %q: error %q does not name the sandbox", env, meta, err)
			}
			return
		}
		if !envOK || !metaOK {
			t.Fatalf("env %q, metadata %q: accepted as %v, %v", env, meta, sb.Env, sb.Metadata)
		}
		if sb.ID != row.id || sb.Tenant != row.tenant || sb.State != row.status || string(sb.RuntimeState) != string(row.runtimeState) ||
			sb.PreviewToken != fuzzPreviewToken || !sb.PreviewPublic {
			t.Fatalf("scanSandbox = %+v, columns out of place", sb)
		}
		for name, tm := range map[string]time.Time{"created": sb.CreatedAt, "updated": sb.UpdatedAt, "expires": sb.ExpiresAt} {
			if tm.Location() != time.UTC {
				t.Fatalf("%s time %v is not UTC", name, tm)
			}
		}
		if sb.CreatedAt.UnixNano() != created || sb.UpdatedAt.UnixNano() != updated {
			t.Fatalf("times %d, %d read as %v, %v", created, updated, sb.CreatedAt, sb.UpdatedAt)
		}
		if got := nullNanos(sb.ExpiresAt); got != row.expires && (expiresSet || got.Valid) {
			t.Fatalf("expires %v read as %v, stored again as %v", row.expires, sb.ExpiresAt, got)
		}
		env2, meta2, err := encodeMaps(&sb)
		if err != nil {
			t.Fatalf("encodeMaps(%v, %v): %v", sb.Env, sb.Metadata, err)
		}
		again := row
		again.env, again.meta = env2, meta2
		sb2, err := scanSandbox(rowFunc(again.scan))
		if err != nil {
			t.Fatalf("env %q, metadata %q: stored again as %q, %q, refused: %v", env, meta, env2, meta2, err)
		}
		if !reflect.DeepEqual(sb2.Env, sb.Env) || !reflect.DeepEqual(sb2.Metadata, sb.Metadata) {
			t.Fatalf("env %q, metadata %q: read %v, %v; stored again and read %v, %v", env, meta, sb.Env, sb.Metadata, sb2.Env, sb2.Metadata)
		}
	})
}

// stringMap reports whether s is stored JSON the store can read: null, or
// one object of strings.
func stringMap(s string) bool {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return false
	}
	m, isMap := v.(map[string]any)
	if v != nil && !isMap {
		return false
	}
	for _, x := range m {
		// A null member decodes as "" into a map of strings.
		if _, ok := x.(string); !ok && x != nil {
			return false
		}
	}
	return true
}

// FuzzSandboxRoundTripSQLite and FuzzSandboxRoundTripPostgres insert a
// sandbox with fuzzed fields into a real database and read it back: what
// InsertSandbox accepts, GetSandbox returns unchanged (map text as JSON can
// carry it: valid UTF-8), and one row that cannot be read back must never
// be written. PostgreSQL refuses more than SQLite (NUL and invalid UTF-8 in
// TEXT); a refused insert is fine, a changed read is not.
func FuzzSandboxRoundTripSQLite(f *testing.F)   { fuzzSandboxRoundTrip(f, backends[0]) }
func FuzzSandboxRoundTripPostgres(f *testing.F) { fuzzSandboxRoundTrip(f, backends[1]) }

func fuzzSandboxRoundTrip(f *testing.F, b backend) {
	f.Add("default", "container", "", 1.5, int64(512), "PATH", "/bin", "owner", "me", []byte(`{"pid":42}`), int64(1_800_000_000_000_000_000))
	f.Add("", "", "oom: killed", 0.0, int64(0), "", "", "", "", []byte(nil), int64(0))
	f.Add("t\x00x", "\xff", "line1\nline2", -1.0, int64(math.MinInt64), "A", "\x00", "k", "ü", []byte{0, 0xff}, int64(-1))
	f.Add("default", "container", "", math.MaxFloat64, int64(math.MaxInt64), "k", "v", "k", "v", []byte{}, int64(math.MaxInt64))
	f.Add("default", "vm", "", math.Inf(1), int64(1), "k", "\x00", "k", "v", []byte{0}, int64(1))
	s, err := Open(context.Background(), b.dsn(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	ctx := context.Background()
	n := 0
	f.Fuzz(func(t *testing.T, template, runtime, errText string, cpus float64, memoryMB int64,
		envKey, envValue, metaKey, metaValue string, runtimeState []byte, expiresNanos int64) {
		for _, s := range []string{envKey, envValue, metaKey, metaValue} {
			if !utf8.ValidString(s) {
				return
			}
		}
		n++
		in := Sandbox{
			ID: fmt.Sprintf("sb-fuzz%d", n), Tenant: "t", Template: template, Runtime: runtime,
			State: api.StateRunning, Error: errText, CPUs: cpus, MemoryMB: memoryMB, Pids: -memoryMB, DiskMB: memoryMB / 3,
			Env: map[string]string{envKey: envValue}, Metadata: map[string]string{metaKey: metaValue},
			RuntimeState: runtimeState, CreatedAt: time.Unix(0, expiresNanos/2),
		}
		if expiresNanos != 0 {
			in.ExpiresAt = time.Unix(0, expiresNanos)
		}
		ins := in
		if err := s.InsertSandbox(ctx, &ins); err != nil {
			return
		}
		defer s.DeleteSandbox(ctx, in.ID)
		got, err := s.GetSandbox(ctx, in.ID)
		if err != nil {
			t.Fatalf("InsertSandbox(%+v) succeeded, GetSandbox: %v", in, err)
		}
		want := in
		want.CreatedAt, want.UpdatedAt, want.Version = ins.CreatedAt, ins.UpdatedAt, ins.Version
		if !want.ExpiresAt.IsZero() {
			want.ExpiresAt = want.ExpiresAt.UTC()
		}
		if len(want.RuntimeState) == 0 && len(got.RuntimeState) == 0 {
			want.RuntimeState, got.RuntimeState = nil, nil
		}
		if !reflect.DeepEqual(got, want) && !(math.IsNaN(cpus) && math.IsNaN(got.CPUs)) {
			t.Fatalf("stored %+v\nread   %+v", want, got)
		}
	})
}
