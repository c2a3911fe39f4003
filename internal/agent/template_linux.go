package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"strings"

	"google.golang.org/protobuf/proto"

	processpb "warren/internal/agent/pb/process"
)

// TemplateFile is where a tenant's template keeps what its sandboxes start
// with (docs/TEMPLATES.md): the template's build writes it into the disk,
// so that every sandbox of the disk, restored or forked on any node, has
// it. The agent reads it at Init when it owns the sandbox's root.
const TemplateFile = "/etc/warren/template.json"

// maxTemplateFile bounds what the agent reads of it: the file is in the
// tenant's own disk, and so theirs to write.
const maxTemplateFile = 1 << 20

// StartTag is the tag of the process a template starts.
const StartTag = "warren-start"

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

// loadTemplate reads TemplateFile when the agent owns the root; a missing
// file is no template (zero config). A bad one is logged and ignored: it
// harms only the sandbox whose disk holds it.
func (s *Server) loadTemplate() TemplateConfig {
	if !s.ownsRoot() {
		return TemplateConfig{}
	}
	f, err := os.Open(TemplateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return TemplateConfig{}
	}
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(f, maxTemplateFile+1))
		f.Close()
	}
	if err == nil && len(b) > maxTemplateFile {
		err = fmt.Errorf("%s: larger than %d bytes", TemplateFile, maxTemplateFile)
	}
	var c TemplateConfig
	if err == nil {
		c, err = ParseTemplateConfig(b)
	}
	if err != nil {
		s.log.Warn("template config ignored", "err", err)
		return TemplateConfig{}
	}
	return c
}

// applyTemplate makes c the defaults of later processes, under the Init
// request's env, and starts c.Start the first time.
func (s *Server) applyTemplate(c TemplateConfig, initEnv map[string]string) {
	env := maps.Clone(c.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, initEnv)
	s.mu.Lock()
	s.env, s.defaultCwd, s.defaultUser = env, c.Workdir, c.User
	start := c.Start != "" && !s.templateStarted
	s.templateStarted = s.templateStarted || start
	s.mu.Unlock()
	if !start {
		return
	}
	_, _, ns, err := s.startProcess(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", c.Start}},
		Tag:     proto.String(StartTag),
	}, false)
	switch {
	case err != nil:
		s.log.Warn("template start command", "err", err)
	case ns != nil:
		s.log.Warn("template start command", "err", strings.TrimSpace(ns.msg))
	}
}

// processDefaults gives cfg the template's user and working directory
// where it names none.
func (s *Server) processDefaults(cfg *processpb.ProcessConfig) {
	s.mu.Lock()
	user, cwd := s.defaultUser, s.defaultCwd
	s.mu.Unlock()
	if cfg.GetUser() == "" && user != "" {
		cfg.User = user
	}
	if cfg.GetCwd() == "" && cwd != "" {
		cfg.Cwd = proto.String(cwd)
	}
}
