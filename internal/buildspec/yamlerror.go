package buildspec

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML package's errors name Go types ("field x not found in type
// buildspec.rawCopy"); this file says them in the format's words.

var (
	lineRE       = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	unknownRE    = regexp.MustCompile(`^field (.*) not found in type buildspec\.(\w+)$`)
	typeRE       = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	duplicateRE  = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
	yamlTypeKeys = map[string][]string{
		"rawSpec":    yamlKeys(rawSpec{}),
		"rawNetwork": yamlKeys(rawNetwork{}),
		"rawPip":     yamlKeys(rawPip{}),
		"rawCopy":    yamlKeys(rawCopy{}),
		"rawStart":   yamlKeys(rawStart{}),
		"rawLimits":  yamlKeys(rawLimits{}),
	}
)

// error turns an error of the YAML package into an *Error in the format's
// words, placed in its step when it is in one. Only the first is kept.
func (p *yamlParser) error(err error) error {
	msg := err.Error()
	if te, ok := err.(*yaml.TypeError); ok && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	e := &Error{Msg: strings.TrimPrefix(msg, "yaml: ")}
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	if m := unknownRE.FindStringSubmatch(e.Msg); m != nil {
		if m[2] == "rawStep" {
			e.Msg = fmt.Sprintf("unknown step %q: a step is one of %s", m[1], kindList())
		} else {
			e.Msg = fmt.Sprintf("unknown key %q (known: %s)", m[1], strings.Join(yamlTypeKeys[m[2]], ", "))
		}
	} else if m := typeRE.FindStringSubmatch(e.Msg); m != nil {
		got := map[string]string{"seq": "a list", "map": "a mapping", "str": "the string", "int": "the number",
			"float": "the number", "bool": "", "null": "nothing"}[m[1]]
		if m[2] != "" {
			got = strings.TrimSpace(got + " " + strconv.Quote(m[2]))
		}
		e.Msg = fmt.Sprintf("want %s, not %s", describeType(m[3]), got)
		kind := map[string]yaml.Kind{"seq": yaml.SequenceNode, "map": yaml.MappingNode}[m[1]]
		if kind == 0 {
			kind = yaml.ScalarNode
		}
		e.Field = fieldAt(p.root(), e.Line, kind)
	} else if m := duplicateRE.FindStringSubmatch(e.Msg); m != nil {
		e.Msg = fmt.Sprintf("key %q is repeated (first at line %s)", m[1], m[2])
	}
	if i := p.stepAt(e.Line); i >= 0 {
		e.Step, e.Kind, e.Field = i+1, p.kindOf(i), ""
	}
	return e
}

// fieldAt returns the dotted name of the key on line, in mapping m and the
// mappings under it, whose value is of the kind a type error on that line
// is about (flow mappings put several keys on a line; the deepest wins), or
// of the last key on line, or "".
func fieldAt(m *yaml.Node, line int, kind yaml.Kind) string {
	best, fallback := "", ""
	var walk func(m *yaml.Node, prefix string)
	walk = func(m *yaml.Node, prefix string) {
		if m == nil || m.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if k.Line > line {
				return
			}
			name := prefix + k.Value
			if k.Line == line {
				fallback = name
				if resolve(v).Kind == kind {
					best = name
				}
			}
			walk(v, name+".") // not into an alias: it may hold itself
		}
	}
	walk(m, "")
	if best == "" {
		return fallback
	}
	return best
}

func describeType(t string) string {
	switch t {
	case "string":
		return "a string"
	case "[]string":
		return "a list of strings"
	case "map[string]string":
		return "a mapping of names to values"
	case "int64":
		return "a whole number"
	case "bool":
		return "true or false"
	case "[]buildspec.rawStep":
		return "a list of steps"
	case "buildspec.rawStep":
		return "a step: a mapping of one key, one of " + kindList()
	}
	if keys, ok := yamlTypeKeys[strings.TrimPrefix(t, "buildspec.")]; ok {
		return "a mapping of " + strings.Join(keys, ", ")
	}
	return t
}

// yamlKeys lists the keys of a raw type, from its yaml tags.
func yamlKeys(v any) []string {
	t := reflect.TypeOf(v)
	var keys []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" {
			keys = append(keys, name)
		}
	}
	return keys
}

func kindNames() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return names
}
