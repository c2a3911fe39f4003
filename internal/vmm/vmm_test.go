package vmm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"warren/internal/vmm/accel"
)

func validConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	kernel := filepath.Join(dir, "vmlinuz")
	for _, f := range []string{disk, kernel} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return Config{
		ID: "sb-abc_1", Kernel: kernel, Cmdline: "console=ttyS0", Disk: disk,
		MemoryMiB: 128, VCPUs: 1, Accel: accel.TCG,
		AgentSocket: filepath.Join(dir, "agent.sock"), ConsoleLog: filepath.Join(dir, "console.log"),
		WorkDir: dir,
	}
}

func TestValidate(t *testing.T) {
	if cfg := validConfig(t); cfg.Validate() != nil {
		t.Fatalf("valid config refused: %v", cfg.Validate())
	}
	ws := validConfig(t)
	ws.Workspace = ws.Kernel // any regular file
	if err := ws.Validate(); err != nil {
		t.Fatalf("valid config with a workspace disk refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"empty id", func(c *Config) { c.ID = "" }, "id"},
		{"id with slash", func(c *Config) { c.ID = "a/b" }, "id"},
		{"long id", func(c *Config) { c.ID = strings.Repeat("a", 129) }, "id"},
		{"zero memory", func(c *Config) { c.MemoryMiB = 0 }, "memory"},
		{"tiny memory", func(c *Config) { c.MemoryMiB = MinMemoryMiB - 1 }, "memory"},
		{"huge memory", func(c *Config) { c.MemoryMiB = MaxMemoryMiB + 1 }, "memory"},
		{"zero vcpus", func(c *Config) { c.VCPUs = 0 }, "vcpus"},
		{"too many vcpus", func(c *Config) { c.VCPUs = MaxVCPUs + 1 }, "vcpus"},
		{"no accel", func(c *Config) { c.Accel = "" }, "accel"},
		{"initrd without kernel", func(c *Config) { c.Kernel, c.Cmdline, c.Initrd = "", "", c.Disk }, "needs a kernel"},
		{"cmdline without kernel", func(c *Config) { c.Kernel = "" }, "needs a kernel"},
		{"no disk", func(c *Config) { c.Disk = "" }, "disk"},
		{"missing disk", func(c *Config) { c.Disk += ".gone" }, "disk"},
		{"disk is a dir", func(c *Config) { c.Disk = c.WorkDir }, "not a regular file"},
		{"missing workspace disk", func(c *Config) { c.Workspace = c.Disk + ".gone" }, "workspace disk"},
		{"workspace disk is a dir", func(c *Config) { c.Workspace = c.WorkDir }, "workspace disk"},
		{"missing kernel", func(c *Config) { c.Kernel += ".gone" }, "kernel"},
		{"missing initrd", func(c *Config) { c.Initrd = c.Kernel + ".gone" }, "initrd"},
		{"no work dir", func(c *Config) { c.WorkDir = "" }, "work dir"},
		{"work dir is a file", func(c *Config) { c.WorkDir = c.Disk }, "not a directory"},
		{"agent socket exists", func(c *Config) { c.AgentSocket = c.Disk }, "already exists"},
		{"agent socket dir missing", func(c *Config) { c.AgentSocket = filepath.Join(c.WorkDir, "no", "a.sock") }, "agent socket"},
		{"agent socket too long", func(c *Config) { c.AgentSocket = filepath.Join(c.WorkDir, strings.Repeat("s", 108)) }, "longer than"},
		{"no console log", func(c *Config) { c.ConsoleLog = "" }, "console log"},
		{"console log is a dir", func(c *Config) { c.ConsoleLog = c.WorkDir }, "console log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig(t)
			tc.edit(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want ErrInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
}

func TestExit(t *testing.T) {
	for _, tc := range []struct {
		exit    Exit
		crashed bool
		text    string
	}{
		{Exit{Code: 0}, false, "exit code 0"},
		{Exit{Code: 0, Reason: "guest-shutdown"}, false, "exit code 0 (guest-shutdown)"},
		{Exit{Code: 1}, true, "exit code 1"},
		{Exit{Code: -1, Signal: syscall.SIGKILL}, true, "killed by signal 9 (killed)"},
		{Exit{Code: -1, Signal: syscall.SIGKILL, Requested: true}, false, "killed by signal 9"},
		{Exit{Code: 1, Requested: true}, false, "exit code 1"},
		{Exit{Code: -1, StatusUnknown: true}, true, "exit status unknown (the machine was attached"},
		{Exit{Code: 0, StatusUnknown: true, Reason: "guest-shutdown"}, false, "exit status unknown"},
		{Exit{Code: -1, StatusUnknown: true, Requested: true}, false, "exit status unknown"},
	} {
		if got := tc.exit.Crashed(); got != tc.crashed {
			t.Errorf("%+v.Crashed() = %v, want %v", tc.exit, got, tc.crashed)
		}
		if got := tc.exit.String(); !strings.HasPrefix(got, tc.text) {
			t.Errorf("%+v.String() = %q, want %q", tc.exit, got, tc.text)
		}
	}
	var err error = &ExitError{Exit: Exit{Code: 1}, Stderr: "qemu: boom"}
	if !errors.Is(err, ErrCrashed) || !errors.Is(err, ErrExited) || errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ExitError matches wrongly: %v", err)
	}
	if !strings.Contains(err.Error(), "qemu: boom") {
		t.Errorf("ExitError text %q lacks stderr", err)
	}
}
