package layer

import (
	"reflect"
	"strings"
	"testing"
)

const (
	hashA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	hashB = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func validManifest() Manifest {
	return Manifest{
		Version:  1,
		ID:       "snap-2",
		Parent:   "snap-1",
		DiskSize: 64 << 20,
		Extents: []Extent{
			{Offset: 0, Length: 4096, Chunk: hashA, Stored: 100},
			{Offset: 8192, Length: MaxChunk, Chunk: hashB, Stored: MaxStored},
			{Offset: 8192 + MaxChunk, Length: 4096, Zero: true},
			{Offset: 64<<20 - 4096, Length: 4096, Chunk: hashA, Stored: 100},
		},
		Labels: map[string]string{"sandbox": "sb-1", "note": "ünïcode"},
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(m *Manifest)
		want   string // substring of the error; "" = valid
	}{
		{"valid", func(m *Manifest) {}, ""},
		{"root layer", func(m *Manifest) { m.Parent = "" }, ""},
		{"no extents", func(m *Manifest) { m.Extents = nil }, ""},
		{"no labels", func(m *Manifest) { m.Labels = nil }, ""},
		{"longest id", func(m *Manifest) { m.ID = strings.Repeat("a", MaxIDLen) }, ""},
		{"largest disk", func(m *Manifest) { m.DiskSize = MaxDiskSize }, ""},
		{"version 0", func(m *Manifest) { m.Version = 0 }, "version 0"},
		{"version 3", func(m *Manifest) { m.Version = 3 }, "version 3, want 1 or 2"},
		{"namespaced", func(m *Manifest) { m.Version, m.Namespace = 2, "tenant_a-1" }, ""},
		{"longest namespace", func(m *Manifest) { m.Version, m.Namespace = 2, strings.Repeat("n", MaxNamespace) }, ""},
		{"version 2 without namespace", func(m *Manifest) { m.Version = 2 }, "namespace: empty"},
		{"version 1 with namespace", func(m *Manifest) { m.Namespace = "t" }, "namespace \"t\" in a version 1 manifest"},
		{"long namespace", func(m *Manifest) { m.Version, m.Namespace = 2, strings.Repeat("n", MaxNamespace+1) }, "namespace: 129 bytes"},
		{"bad namespace", func(m *Manifest) { m.Version, m.Namespace = 2, "T/1" }, "namespace: \"T/1\""},
		{"empty id", func(m *Manifest) { m.ID = "" }, "id: empty"},
		{"long id", func(m *Manifest) { m.ID = strings.Repeat("a", MaxIDLen+1) }, "id: 129 bytes"},
		{"upper-case id", func(m *Manifest) { m.ID = "Snap" }, "id: \"Snap\""},
		{"slash in id", func(m *Manifest) { m.ID = "a/b" }, "id: \"a/b\""},
		{"bad parent", func(m *Manifest) { m.Parent = "x_y" }, "parent: \"x_y\""},
		{"own parent", func(m *Manifest) { m.Parent = m.ID }, "parent: the layer's own id"},
		{"zero disk", func(m *Manifest) { m.DiskSize = 0 }, "disk_size 0"},
		{"negative disk", func(m *Manifest) { m.DiskSize = -4096 }, "disk_size -4096"},
		{"unaligned disk", func(m *Manifest) { m.DiskSize = 64<<20 + 512 }, "not a multiple of 4096"},
		{"huge disk", func(m *Manifest) { m.DiskSize = MaxDiskSize + 4096 }, "over"},
		{"unaligned offset", func(m *Manifest) { m.Extents[1].Offset = 8192 + 512 }, "extent 1 (offset 8704): offset not"},
		{"negative offset", func(m *Manifest) { m.Extents[0].Offset = -4096 }, "extent 0 (offset -4096)"},
		{"overlap", func(m *Manifest) { m.Extents[1].Offset = 0 }, "extent 1 (offset 0): overlaps"},
		{"unsorted", func(m *Manifest) { m.Extents[0], m.Extents[1] = m.Extents[1], m.Extents[0] }, "extent 1 (offset 0): overlaps"},
		{"empty extent", func(m *Manifest) { m.Extents[0].Length = 0 }, "extent 0 (offset 0): length 0"},
		{"long extent", func(m *Manifest) { m.Extents[1].Length = MaxChunk + 4096 }, "extent 1 (offset 8192): length"},
		{"unaligned length", func(m *Manifest) { m.Extents[0].Length = 100 }, "length 100: not a multiple"},
		{"past disk", func(m *Manifest) { m.Extents[3].Offset = 64 << 20 }, "extent 3 (offset 67108864): ends at"},
		{"overflowing end", func(m *Manifest) { m.Extents[3].Offset = 1<<63 - 4096 }, "ends at"},
		{"short hash", func(m *Manifest) { m.Extents[0].Chunk = "abc" }, "extent 0 (offset 0): chunk \"abc\""},
		{"upper-case hash", func(m *Manifest) { m.Extents[0].Chunk = strings.ToUpper(hashA) }, "not 64 lowercase hex"},
		{"no hash", func(m *Manifest) { m.Extents[0].Chunk = "" }, "extent 0 (offset 0): chunk \"\""},
		{"no stored", func(m *Manifest) { m.Extents[0].Stored = 0 }, "stored 0"},
		{"huge stored", func(m *Manifest) { m.Extents[0].Stored = MaxStored + 1 }, "stored 4210689"},
		{"zero with chunk", func(m *Manifest) { m.Extents[2].Chunk = hashA }, "extent 2 (offset 4202496): zero extent with a chunk"},
		{"zero with stored", func(m *Manifest) { m.Extents[2].Stored = 5 }, "zero extent with a chunk or stored size"},
		{"too many extents", func(m *Manifest) {
			m.DiskSize = MaxDiskSize
			m.Extents = make([]Extent, MaxExtents+1)
		}, "4194305 extents"},
		{"too many labels", func(m *Manifest) {
			for i := range MaxLabels {
				m.Labels[strings.Repeat("k", i+1)] = "v"
			}
		}, "66 labels"},
		{"empty label key", func(m *Manifest) { m.Labels[""] = "v" }, "label key \"\""},
		{"long label key", func(m *Manifest) { m.Labels[strings.Repeat("k", MaxLabelKey+1)] = "v" }, "label key"},
		{"long label value", func(m *Manifest) { m.Labels["k"] = strings.Repeat("v", MaxLabelValue+1) }, "value of 4097 bytes"},
		{"invalid utf-8 label", func(m *Manifest) { m.Labels["k"] = "\xff" }, "label \"k\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := validManifest()
			tc.change(&m)
			err := m.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate = nil, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Validate = %q, want it to contain %q", err, tc.want)
			}
			// Marshal refuses what Validate refuses.
			if _, merr := m.Marshal(); (merr == nil) != (err == nil) {
				t.Errorf("Marshal err = %v, Validate err = %v", merr, err)
			}
		})
	}
}

func TestMarshalParseRoundTrip(t *testing.T) {
	namespaced := validManifest()
	namespaced.Version, namespaced.Namespace = VersionNamespaced, "tenant-a"
	for _, m := range []Manifest{validManifest(), namespaced, {Version: 1, ID: "root", DiskSize: 4096}} {
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("ParseManifest(%s): %v", b, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", b, got, m)
		}
	}
	// An empty layer lists its extents as [], not null.
	b, err := Manifest{Version: 1, ID: "root", DiskSize: 4096}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":1,"id":"root","disk_size":4096,"extents":[]}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	b, err = Manifest{Version: 2, ID: "root", Namespace: "t", DiskSize: 4096}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":2,"id":"root","namespace":"t","disk_size":4096,"extents":[]}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
}

func TestParseManifestStrict(t *testing.T) {
	const ok = `{"version":1,"id":"a","disk_size":8192,"extents":[{"offset":0,"length":4096,"zero":true}]}`
	if _, err := ParseManifest([]byte(ok)); err != nil {
		t.Fatalf("ParseManifest(%s) = %v", ok, err)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"unknown field", `{"version":1,"id":"a","disk_size":8192,"extents":[],"size":1}`, `unknown field "size"`},
		{"unknown extent field", `{"version":1,"id":"a","disk_size":8192,"extents":[{"offset":0,"length":4096,"zero":true,"crc":1}]}`, `unknown field "crc"`},
		{"trailing data", ok + `{}`, "data after the manifest"},
		{"trailing garbage", ok + `]`, "data after the manifest"},
		{"not json", `version: 1`, "parse manifest"},
		{"array", `[]`, "parse manifest"},
		{"float size", `{"version":1,"id":"a","disk_size":8192.5,"extents":[]}`, "disk_size"},
		{"string version", `{"version":"1","id":"a","disk_size":8192}`, "version"},
		{"missing id", `{"version":1,"disk_size":8192}`, "id: empty"},
		{"namespace in version 1", `{"version":1,"id":"a","namespace":"t","disk_size":8192,"extents":[]}`, "in a version 1 manifest"},
		{"version 2 without namespace", `{"version":2,"id":"a","disk_size":8192,"extents":[]}`, "namespace: empty"},
		{"empty", ``, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseManifest(%s) = %v, want an error with %q", tc.in, err, tc.want)
			}
		})
	}
	// Empty extents and labels come back nil, so that a parsed manifest
	// re-marshals and re-parses equal.
	m, err := ParseManifest([]byte(`{"version":1,"id":"a","disk_size":8192,"extents":[],"labels":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Extents != nil || m.Labels != nil {
		t.Errorf("empty extents and labels parsed as %#v, %#v; want nil", m.Extents, m.Labels)
	}
}

func TestManifestChunks(t *testing.T) {
	got := validManifest().Chunks()
	if want := []string{hashA, hashB}; !reflect.DeepEqual(got, want) {
		t.Errorf("Chunks = %v, want %v", got, want)
	}
	if got := (Manifest{}).Chunks(); got != nil {
		t.Errorf("Chunks of an empty manifest = %v, want nil", got)
	}
}

// FuzzParseManifest: ParseManifest never panics, and whatever it accepts
// re-marshals and re-parses equal. The seeds in testdata/fuzz run in every
// plain go test.
func FuzzParseManifest(f *testing.F) {
	b, err := validManifest().Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1,"id":"a","disk_size":4096,"extents":null,"labels":{"":"x"}}`))
	f.Add([]byte(`{"version":2,"id":"a","namespace":"t-1","disk_size":4096,"extents":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		b, err := m.Marshal()
		if err != nil {
			t.Fatalf("Marshal of an accepted manifest: %v", err)
		}
		m2, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", b, err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-parse differs:\n got %+v\nwant %+v", m2, m)
		}
	})
}
