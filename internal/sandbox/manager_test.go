package sandbox

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/runtime"
)

func TestValidate(t *testing.T) {
	m := &Manager{cfg: Config{}.withDefaults()}
	src := source{template: "default", size: 4 << 30}
	cpus := float64(goruntime.NumCPU())
	cases := []struct {
		name string
		req  api.CreateSandboxRequest
		want string // substring of the bad_request message; "" means valid
	}{
		{"defaults", api.CreateSandboxRequest{}, ""},
		{"all set", api.CreateSandboxRequest{DiskMB: 8192, SandboxSpec: api.SandboxSpec{CPUs: 0.5, MemoryMB: 1024, Pids: 100, TimeoutSeconds: 60}}, ""},
		{"negative cpus", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{CPUs: -1}}, "cpus must be between"},
		{"too many cpus", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{CPUs: cpus + 1}}, "cpus must be between"},
		{"negative memory", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: -5}}, "memory_mb must be between 64"},
		{"tiny memory", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: 10}}, "memory_mb must be between 64"},
		{"absurd memory", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: 1 << 40}}, "memory_mb must be between 64"},
		{"few pids", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Pids: 3}}, "pids must be between 16"},
		{"disk below template", api.CreateSandboxRequest{DiskMB: 100}, "disk_mb must be between 4096"},
		{"negative timeout", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{TimeoutSeconds: -1}}, "timeout_seconds must be between 1"},
		{"timeout past max", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{TimeoutSeconds: 1 << 40}}, "timeout_seconds must be between 1"},
		{"env name with =", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Env: map[string]string{"A=B": "c"}}}, "env variable"},
		{"env value with NUL", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Env: map[string]string{"A": "b\x00"}}}, "env variable"},
		{"empty metadata key", api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Metadata: map[string]string{"": "x"}}}, "metadata"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, err := m.validate(t.Context(), "acme", c.req, src)
			if c.want == "" {
				if err != nil {
					t.Fatalf("valid request refused: %v", err)
				}
				if rec.Tenant != "acme" || rec.State != api.StateStarting || rec.CPUs <= 0 || rec.MemoryMB < 64 ||
					rec.DiskMB < 4096 || !rec.ExpiresAt.After(time.Now()) {
					t.Errorf("record %+v lacks its defaults", rec)
				}
				return
			}
			if !api.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want bad_request containing %q", err, c.want)
			}
		})
	}
}

// fakeRuntime is a runtime that is available or not; pickRuntime only asks.
type fakeRuntime struct {
	name string
	err  error
}

func (f fakeRuntime) Name() string      { return f.name }
func (f fakeRuntime) Isolation() string { return f.name }
func (f fakeRuntime) Available() error  { return f.err }
func (f fakeRuntime) Start(context.Context, runtime.Spec) (runtime.Instance, error) {
	return nil, errors.New("not started in this test")
}
func (f fakeRuntime) Adopt(context.Context, runtime.Spec, []byte) (runtime.Instance, error) {
	return nil, runtime.ErrGone
}
func (f fakeRuntime) Sweep(context.Context, map[string]bool, map[string]bool) error { return nil }

func TestPickRuntime(t *testing.T) {
	vm := fakeRuntime{name: "vm", err: errors.New("no hardware virtualization")}
	ctr := fakeRuntime{name: "container"}
	m := &Manager{deps: Deps{Runtimes: []runtime.Runtime{vm, ctr}}}
	cases := []struct {
		ask, want, code string
	}{
		{"", "container", ""},
		{"auto", "container", ""},
		{"container", "container", ""},
		{"vm", "", api.CodeUnavailable},
		{"magic", "", api.CodeBadRequest},
	}
	for _, c := range cases {
		rt, err := m.pickRuntime(c.ask)
		switch {
		case c.code != "" && !api.IsCode(err, c.code):
			t.Errorf("runtime %q: err %v, want %s", c.ask, err, c.code)
		case c.code == "" && (err != nil || rt.Name() != c.want):
			t.Errorf("runtime %q: got %v, %v; want %s", c.ask, rt, err, c.want)
		}
	}
	none := &Manager{deps: Deps{Runtimes: []runtime.Runtime{vm}}}
	if _, err := none.pickRuntime("auto"); !api.IsCode(err, api.CodeUnavailable) || !strings.Contains(err.Error(), "no hardware virtualization") {
		t.Errorf("auto with nothing available: %v, want unavailable with the reason", err)
	}
}

// accelRuntime is an available vm runtime under an accelerator.
type accelRuntime struct {
	fakeRuntime
	accel string
}

func (a accelRuntime) Accel() string { return a.accel }

// TestPickRuntimeAccelAndRequirement: auto takes a vm under kvm but not
// under tcg (unless the node requires vm isolation); a required isolation
// refuses weaker runtimes, naming the requirement.
func TestPickRuntimeAccelAndRequirement(t *testing.T) {
	ctr := fakeRuntime{name: "container"}
	cases := []struct {
		name, accel, require, ask, want, code string
	}{
		{"auto takes kvm vm", "kvm", "", "auto", "vm", ""},
		{"auto skips tcg vm", "tcg", "", "auto", "container", ""},
		{"tcg vm by name", "tcg", "", "vm", "vm", ""},
		{"required vm under tcg", "tcg", "vm", "", "vm", ""},
		{"required vm refuses container", "kvm", "vm", "container", "", api.CodeBadRequest},
		{"required container allows vm", "kvm", "container", "vm", "vm", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vm := accelRuntime{fakeRuntime{name: "vm"}, c.accel}
			m := &Manager{deps: Deps{Runtimes: []runtime.Runtime{vm, ctr}}, cfg: Config{RequireIsolation: c.require}}
			rt, err := m.pickRuntime(c.ask)
			switch {
			case c.code != "":
				if !api.IsCode(err, c.code) || !strings.Contains(err.Error(), "requires "+c.require) {
					t.Errorf("err %v, want %s naming the requirement", err, c.code)
				}
			case err != nil || rt.Name() != c.want:
				t.Errorf("got %v, %v; want %s", rt, err, c.want)
			}
		})
	}
	only := &Manager{deps: Deps{Runtimes: []runtime.Runtime{ctr}}, cfg: Config{RequireIsolation: "vm"}}
	if _, err := only.pickRuntime("auto"); !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "requires vm isolation") {
		t.Errorf("auto on a container-only node requiring vm: %v, want conflict naming the requirement", err)
	}
}
