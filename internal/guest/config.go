package guest

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// TemplateFile is where a tenant's template keeps what its sandboxes start
// with (docs/TEMPLATES.md): the template's build writes it into the disk,
// so that every sandbox of the disk, restored or forked on any node, has
// it. The agent reads it at Init when it owns the sandbox's root.
const TemplateFile = "/etc/warren/template.json"

// TemplateConfig is the content of TemplateFile.
type TemplateConfig struct {
	// Env is the environment of every process, under the sandbox's own.
	Env map[string]string `json:"env,omitempty"`
	// Workdir and User are a process's when its request names none.
	Workdir string `json:"workdir,omitempty"`
	User    string `json:"user,omitempty"`
	// Start is a shell command the agent starts once, at the first Init
	// (a vm restored from memory does not start it again).
	Start string `json:"start,omitempty"`
}

// ParseTemplateConfig reads a TemplateFile's content, checking what the
// agent relies on.
func ParseTemplateConfig(b []byte) (TemplateConfig, error) {
	var c TemplateConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return TemplateConfig{}, fmt.Errorf("%s: %w", TemplateFile, err)
	}
	for k, v := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return TemplateConfig{}, fmt.Errorf("%s: bad environment variable %q", TemplateFile, k)
		}
	}
	if c.Workdir != "" && (!path.IsAbs(c.Workdir) || strings.ContainsRune(c.Workdir, 0)) {
		return TemplateConfig{}, fmt.Errorf("%s: workdir %q is not an absolute path", TemplateFile, c.Workdir)
	}
	if strings.ContainsRune(c.User, 0) || strings.ContainsRune(c.Start, 0) {
		return TemplateConfig{}, fmt.Errorf("%s: NUL in user or start", TemplateFile)
	}
	return c, nil
}

// FirstExecFiles are what a first exec in a sandbox of a Debian-like image
// reads: the shell, true, the dynamic loader and libc, and the user
// database. Each sandbox reads its disk through a loop device of its own,
// whose page cache no other sandbox shares, so a first exec that finds
// none of them cached waits some milliseconds for them (docs/BENCHMARKS.md,
// "Warm pools").
var FirstExecFiles = []string{
	"/bin/sh", "/usr/bin/true", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/etc/passwd", "/etc/group",
}
