package buildspec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"warren/api"
)

// The YAML shapes, decoded strictly: a key that no field names is an error.
// Their yaml tags are the format's key names.
type (
	rawSpec struct {
		From    string            `yaml:"from"`
		Network *rawNetwork       `yaml:"network"`
		Env     map[string]string `yaml:"env"`
		Steps   []rawStep         `yaml:"steps"`
		Start   *rawStart         `yaml:"start"`
		Limits  *rawLimits        `yaml:"limits"`
	}
	rawNetwork struct {
		None  bool     `yaml:"none"`
		Allow []string `yaml:"allow"`
		Deny  []string `yaml:"deny"`
	}
	// rawStep has one field per kind, named as the kind.
	rawStep struct {
		Apt     []string          `yaml:"apt"`
		Pip     *rawPip           `yaml:"pip"`
		Copy    *rawCopy          `yaml:"copy"`
		Run     *rawRun           `yaml:"run"`
		Env     map[string]string `yaml:"env"`
		Workdir *string           `yaml:"workdir"`
		User    *string           `yaml:"user"`
	}
	// rawPip is a list of requirements or this mapping.
	rawPip struct {
		Packages      []string `yaml:"packages"`
		IndexURL      string   `yaml:"index_url"`
		ExtraIndexURL string   `yaml:"extra_index_url"`
	}
	rawCopy struct {
		Src   string `yaml:"src"`
		Dest  string `yaml:"dest"`
		Mode  string `yaml:"mode"` // octal digits, quoted or not
		Owner string `yaml:"owner"`
	}
	// rawRun is a string (a shell command) or a list (an argv).
	rawRun struct {
		Shell string
		Argv  []string
	}
	rawStart struct {
		Command             string `yaml:"command"`
		Ready               string `yaml:"ready"`
		ReadyTimeoutSeconds *int64 `yaml:"ready_timeout_seconds"`
	}
	rawLimits struct {
		TimeoutSeconds *int64 `yaml:"timeout_seconds"`
		DiskMB         *int64 `yaml:"disk_mb"`
	}
)

func (p *rawPip) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		return n.Decode(&p.Packages)
	}
	if n.Kind == yaml.MappingNode {
		// Node.Decode does not check for unknown keys: check them here, in
		// the strict decoder's words.
		if err := knownKeys(n, "rawPip", yamlKeys(rawPip{})); err != nil {
			return err
		}
		type plain rawPip
		return n.Decode((*plain)(p))
	}
	return typeError("line %d: want a list of packages or a mapping of %s", n.Line, strings.Join(yamlKeys(rawPip{}), ", "))
}

func (r *rawRun) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		r.Shell = n.Value
		return nil
	case yaml.SequenceNode:
		if err := n.Decode(&r.Argv); err != nil {
			return err
		}
		if r.Argv == nil {
			r.Argv = []string{}
		}
		return nil
	}
	return typeError("line %d: want a shell command (a string) or an argv (a list of strings)", n.Line)
}

func knownKeys(n *yaml.Node, typeName string, keys []string) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !slices.Contains(keys, k.Value) {
			return typeError("line %d: field %s not found in type buildspec.%s", k.Line, k.Value, typeName)
		}
	}
	return nil
}

// typeError is an error a custom unmarshaler returns so that the decoder
// keeps it in order with its own.
func typeError(format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf(format, args...)}}
}

// Parse parses and validates a warren.yaml. Errors are *Error values that
// say the line and, inside a step, the step.
func Parse(data []byte) (*Spec, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{Msg: fmt.Sprintf("the file is %d bytes, at most %d", len(data), MaxFileSize)}
	}
	p := &yamlParser{}
	if err := yaml.Unmarshal(data, &p.doc); err != nil {
		return nil, p.error(err)
	}
	if p.doc.Kind == 0 {
		return nil, &Error{Msg: "the file is empty: it needs at least from"}
	}
	if err := p.indexSteps(); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawSpec
	if err := dec.Decode(&raw); err != nil {
		return nil, p.error(err)
	}
	if err := dec.Decode(new(yaml.Node)); err != io.EOF {
		return nil, &Error{Msg: "more than one YAML document: a spec is one"}
	}
	s, err := p.convert(&raw)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Line == 0 {
			e.Line = p.lineOf(e.Field)
		}
		return nil, err
	}
	return s, nil
}

// yamlParser holds the document's node tree, for the lines of what the
// typed decoding does not place.
type yamlParser struct {
	doc     yaml.Node
	steps   []*yaml.Node // the steps' nodes, in order
	stepEnd int          // the first line after the steps, 0 for the end of the file
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func (p *yamlParser) root() *yaml.Node {
	if p.doc.Kind == yaml.DocumentNode && len(p.doc.Content) == 1 {
		return resolve(p.doc.Content[0])
	}
	return nil
}

// lookup returns the key and value nodes of key in mapping m.
func lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], resolve(m.Content[i+1])
		}
	}
	return nil, nil
}

// lineOf returns the line of a dotted field ("start.command"), or of the
// nearest part of it that exists, or 0.
func (p *yamlParser) lineOf(field string) int {
	line, n := 0, p.root()
	for part := range strings.SplitSeq(field, ".") {
		k, v := lookup(n, part)
		if k == nil {
			break
		}
		line, n = k.Line, v
	}
	return line
}

// indexSteps finds the steps' nodes and checks that each is a mapping of
// exactly one key with a value, which the typed decoding cannot tell.
func (p *yamlParser) indexSteps() error {
	root := p.root()
	key, seq := lookup(root, "steps")
	if seq == nil || seq.Kind != yaml.SequenceNode {
		return nil // the typed decoding says what is wrong
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if l := root.Content[i].Line; l > key.Line && (p.stepEnd == 0 || l < p.stepEnd) {
			p.stepEnd = l
		}
	}
	for i, n := range seq.Content {
		n = resolve(n)
		p.steps = append(p.steps, n)
		if n.Kind != yaml.MappingNode {
			continue
		}
		e := &Error{Line: n.Line, Step: i + 1}
		switch len(n.Content) / 2 {
		case 0:
			e.Msg = "a step is a mapping of one key, one of " + kindList()
			return e
		case 1:
			e.Kind = p.kindOf(i)
			if v := resolve(n.Content[1]); v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
				e.Msg = "has no value"
				return e
			}
		default:
			var keys []string
			for j := 0; j < len(n.Content); j += 2 {
				keys = append(keys, n.Content[j].Value)
			}
			e.Msg = fmt.Sprintf("has %d keys (%s): a step is exactly one of %s; make each a step of its own",
				len(keys), strings.Join(keys, ", "), kindList())
			return e
		}
	}
	return nil
}

// kindOf returns the kind step i is written as, or "".
func (p *yamlParser) kindOf(i int) Kind {
	n := p.steps[i]
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 || !slices.Contains(kindNames(), n.Content[0].Value) {
		return ""
	}
	return Kind(n.Content[0].Value)
}

// stepAt returns the index of the step whose lines hold line, or -1 (also
// when more than one step starts on that line, a flow list).
func (p *yamlParser) stepAt(line int) int {
	if line == 0 || (p.stepEnd > 0 && line >= p.stepEnd) {
		return -1
	}
	at := -1
	for i, n := range p.steps {
		switch {
		case n.Line == line && at >= 0 && p.steps[at].Line == line:
			return -1
		case n.Line <= line:
			at = i
		}
	}
	return at
}

// convert makes the Spec from its decoded form, cleaning paths; Validate
// checks the rest.
func (p *yamlParser) convert(raw *rawSpec) (*Spec, error) {
	s := &Spec{From: raw.From, Env: raw.Env}
	if raw.Network != nil {
		s.Network = &api.NetworkPolicy{None: raw.Network.None, Allow: raw.Network.Allow, Deny: raw.Network.Deny}
	}
	for i, r := range raw.Steps {
		st, msg := r.step()
		if i < len(p.steps) {
			st.Line = p.steps[i].Line
		}
		if msg != "" {
			return nil, &Error{Line: st.Line, Step: i + 1, Kind: st.Kind, Msg: msg}
		}
		s.Steps = append(s.Steps, st)
	}
	if r := raw.Start; r != nil {
		s.Start = &Start{Command: r.Command, Ready: r.Ready, ReadyTimeout: DefaultReadyTimeout}
		if r.ReadyTimeoutSeconds != nil {
			if err := p.seconds(&s.Start.ReadyTimeout, "start.ready_timeout_seconds", *r.ReadyTimeoutSeconds, MaxReadyTimeout); err != nil {
				return nil, err
			}
		}
	}
	if r := raw.Limits; r != nil {
		if r.TimeoutSeconds != nil {
			if err := p.seconds(&s.Limits.Timeout, "limits.timeout_seconds", *r.TimeoutSeconds, MaxTimeout); err != nil {
				return nil, err
			}
		}
		if r.DiskMB != nil {
			if *r.DiskMB == 0 {
				return nil, &Error{Line: p.lineOf("limits.disk_mb"), Field: "limits.disk_mb", Msg: fmt.Sprintf("0: want %d to %d", MinDiskMB, MaxDiskMB)}
			}
			s.Limits.DiskMB = *r.DiskMB
		}
	}
	return s, nil
}

// seconds sets *d to n seconds, refusing what is out of 1..max (0 too: in a
// Spec, 0 would mean the default).
func (p *yamlParser) seconds(d *time.Duration, field string, n int64, limit time.Duration) error {
	if n < 1 || n > int64(limit/time.Second) {
		return &Error{Line: p.lineOf(field), Field: field, Msg: fmt.Sprintf("%d: want 1 to %d seconds", n, int64(limit/time.Second))}
	}
	*d = time.Duration(n) * time.Second
	return nil
}

// step makes the Step r says, or says what is wrong. indexSteps made sure
// that exactly one field is set.
func (r rawStep) step() (Step, string) {
	switch {
	case r.Apt != nil:
		return Step{Kind: KindApt, Packages: r.Apt}, ""
	case r.Pip != nil:
		return Step{Kind: KindPip, Packages: r.Pip.Packages, IndexURL: r.Pip.IndexURL, ExtraIndexURL: r.Pip.ExtraIndexURL}, ""
	case r.Copy != nil:
		st := Step{Kind: KindCopy, Src: r.Copy.Src, Dest: r.Copy.Dest, Owner: r.Copy.Owner}
		if st.Src != "" {
			st.Src = path.Clean(st.Src)
		}
		if path.IsAbs(st.Dest) {
			st.Dest = cleanDest(st.Dest)
		}
		if r.Copy.Mode != "" {
			m, err := strconv.ParseUint(strings.TrimPrefix(r.Copy.Mode, "0o"), 8, 32)
			if err != nil {
				return st, fmt.Sprintf("mode %q: want octal digits, such as \"0644\"", r.Copy.Mode)
			}
			mode := uint32(m)
			st.Mode = &mode
		}
		return st, ""
	case r.Run != nil:
		return Step{Kind: KindRun, Shell: r.Run.Shell, Argv: r.Run.Argv}, ""
	case r.Env != nil:
		return Step{Kind: KindEnv, Env: r.Env}, ""
	case r.Workdir != nil:
		st := Step{Kind: KindWorkdir, Dir: *r.Workdir}
		if path.IsAbs(st.Dir) {
			st.Dir = path.Clean(st.Dir)
		}
		return st, ""
	case r.User != nil:
		return Step{Kind: KindUser, User: *r.User}, ""
	}
	return Step{}, "a step is a mapping of one key, one of " + kindList()
}
