package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"

	processpb "warren/internal/agent/pb/process"
	"warren/internal/guest"
)

// maxTemplateFile bounds what the agent reads of guest.TemplateFile:
// the file is in the tenant's own disk, and so theirs to write.
const maxTemplateFile = 1 << 20

// StartTag is the tag of the process a template starts.
const StartTag = "warren-start"

// loadTemplate reads guest.TemplateFile when the agent owns the root;
// a missing file is no template (zero config). A bad one is logged and ignored: it
// harms only the sandbox whose disk holds it.
func (s *Server) loadTemplate() guest.TemplateConfig {
	if !s.ownsRoot() {
		return guest.TemplateConfig{}
	}
	f, err := os.Open(guest.TemplateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return guest.TemplateConfig{}
	}
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(f, maxTemplateFile+1))
		f.Close()
	}
	if err == nil && len(b) > maxTemplateFile {
		err = fmt.Errorf("%s: larger than %d bytes", guest.TemplateFile, maxTemplateFile)
	}
	var c guest.TemplateConfig
	if err == nil {
		c, err = guest.ParseTemplateConfig(b)
	}
	if err != nil {
		s.log.Warn("template config ignored", "err", err)
		return guest.TemplateConfig{}
	}
	return c
}

// applyTemplate makes c the defaults of later processes, under the Init
// request's env, and starts c.Start the first time.
func (s *Server) applyTemplate(c guest.TemplateConfig, initEnv map[string]string) {
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
