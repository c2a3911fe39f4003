package buildspec

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file reads a Dockerfile's text as Docker's own parser does: parser
// directives, comments, line continuations, words, quotes and variable
// expansion. dockerfile.go gives the instructions their meaning.

// instruction is one instruction of a Dockerfile, its continuation lines
// joined.
type instruction struct {
	line int    // the line it starts on
	cmd  string // upper case: RUN, COPY...
	args string // the rest, trimmed
}

var directiveRE = regexp.MustCompile(`^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$`)

// splitInstructions returns the instructions of a Dockerfile and its escape
// character (a "# escape=" directive may make it a backtick).
func splitInstructions(data []byte) ([]instruction, rune, error) {
	lines := strings.Split(strings.TrimPrefix(string(data), "\ufeff"), "\n")
	escape := '\\'
	directives := true // parser directives come first, before any other line
	var out []instruction
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSuffix(lines[i], "\r")
		trimmed := strings.TrimSpace(l)
		if directives {
			m := directiveRE.FindStringSubmatch(trimmed)
			if m != nil {
				switch strings.ToLower(m[1]) {
				case "escape":
					if m[2] != `\` && m[2] != "`" {
						return nil, 0, &Error{Line: i + 1, Field: "escape", Msg: fmt.Sprintf("%q: the escape character is \\ or `", m[2])}
					}
					escape = rune(m[2][0])
					continue
				case "syntax", "check":
					continue // BuildKit's: nothing here depends on them
				}
			}
			directives = false
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		start := i + 1
		body, more := trimContinuation(strings.TrimLeft(l, " \t"), escape)
		for more && i+1 < len(lines) {
			i++
			next := strings.TrimSuffix(lines[i], "\r")
			// Docker drops comment lines and empty lines inside a
			// continued instruction.
			if t := strings.TrimSpace(next); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			var part string
			part, more = trimContinuation(next, escape)
			body += part
		}
		cmd, args, _ := strings.Cut(strings.TrimSpace(body), " ")
		if c, a, ok := strings.Cut(cmd, "\t"); ok {
			cmd, args = c, a+" "+args
		}
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
	}
	return out, escape, nil
}

// trimContinuation removes the escape character that ends l, and the
// blanks after it, and reports whether there was one.
func trimContinuation(l string, escape rune) (string, bool) {
	t := strings.TrimRight(l, " \t")
	if strings.HasSuffix(t, string(escape)) {
		return t[:len(t)-1], true
	}
	return l, false
}

// parseJSONArray returns s's strings when s is a JSON array of strings (the
// exec form of RUN, CMD, ENTRYPOINT, COPY); ok is false otherwise, and then
// s is in the shell form, as Docker has it.
func parseJSONArray(s string) (list []string, ok bool) {
	if !strings.HasPrefix(s, "[") {
		return nil, false
	}
	if err := json.Unmarshal([]byte(s), &list); err != nil || list == nil {
		return nil, false
	}
	return list, true
}

// splitWords splits s at blanks outside quotes, keeping the quotes and
// escapes in the words for expand to remove (Docker's parseWords).
func splitWords(s string, escape rune) []string {
	var words []string
	var word strings.Builder
	inWord, blankOK := false, false
	var quote rune // the quote we are in, or 0
	flush := func() {
		if blankOK || word.Len() > 0 {
			words = append(words, word.String())
		}
		word.Reset()
		inWord, blankOK = false, false
	}
	for pos := 0; pos < len(s); {
		ch, w := utf8.DecodeRuneInString(s[pos:])
		pos += w
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			} else if ch == escape && quote != '\'' {
				if pos == len(s) {
					continue
				}
				word.WriteRune(ch)
				ch, w = utf8.DecodeRuneInString(s[pos:])
				pos += w
			}
			word.WriteRune(ch)
		case unicode.IsSpace(ch):
			if inWord {
				flush()
			}
		default:
			inWord = true
			if ch == '\'' || ch == '"' {
				quote, blankOK = ch, true
			}
			if ch == escape {
				if pos == len(s) {
					continue
				}
				word.WriteRune(ch)
				ch, w = utf8.DecodeRuneInString(s[pos:])
				pos += w
			}
			word.WriteRune(ch)
		}
	}
	if inWord {
		flush()
	}
	return words
}

// expander expands a word as Docker does in the instructions it expands
// (ENV, ARG, WORKDIR, USER, COPY, ADD, FROM): $NAME, ${NAME}, ${NAME:-word},
// ${NAME-word}, ${NAME:+word} and ${NAME+word}; quotes and escapes are
// removed. A variable that is not set is an error (but in the forms with a
// word): Docker would make it empty, but warren cannot see the base
// template's environment, and a silently empty PATH is worse than an error.
type expander struct {
	escape rune
	lookup func(name string) (string, bool)
}

// notSetError is the error for a variable that is not set.
type notSetError struct{ name string }

func (e *notSetError) Error() string {
	return fmt.Sprintf("$%s is not set earlier in this file (warren cannot see the base template's environment): set it with ENV or ARG, or write the value out", e.name)
}

func (x *expander) expand(s string) (string, error) {
	var b strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		switch ch := rs[i]; {
		case ch == x.escape:
			if i+1 < len(rs) {
				i++
				b.WriteRune(rs[i])
			}
		case ch == '\'':
			end := indexRune(rs, i+1, '\'')
			if end < 0 {
				return "", fmt.Errorf("unterminated single quote in %q", s)
			}
			b.WriteString(string(rs[i+1 : end]))
			i = end
		case ch == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				switch {
				case rs[j] == x.escape && j+1 < len(rs) && (rs[j+1] == '"' || rs[j+1] == '$' || rs[j+1] == x.escape):
					j++
					b.WriteRune(rs[j])
				case rs[j] == '$':
					n, err := x.dollar(rs, j, &b)
					if err != nil {
						return "", err
					}
					j = n
				default:
					b.WriteRune(rs[j])
				}
			}
			if j >= len(rs) {
				return "", fmt.Errorf("unterminated double quote in %q", s)
			}
			i = j
		case ch == '$':
			n, err := x.dollar(rs, i, &b)
			if err != nil {
				return "", err
			}
			i = n
		default:
			b.WriteRune(ch)
		}
	}
	return b.String(), nil
}

// dollar expands the reference at rs[i] ('$') into b and returns the index
// of its last rune.
func (x *expander) dollar(rs []rune, i int, b *strings.Builder) (int, error) {
	if i+1 < len(rs) && isNameStart(rs[i+1]) {
		j := i + 1
		for j < len(rs) && isNameRune(rs[j]) {
			j++
		}
		v, err := x.value(string(rs[i+1 : j]))
		b.WriteString(v)
		return j - 1, err
	}
	if i+1 >= len(rs) || rs[i+1] != '{' {
		b.WriteRune('$') // "$" alone, "$1", "$@": literal, as Docker has them
		return i, nil
	}
	end := matchingBrace(rs, i+2)
	if end < 0 {
		return 0, fmt.Errorf("missing } in %q", string(rs[i:]))
	}
	inner := string(rs[i+2 : end])
	j := 0
	for j < len(inner) && isNameRune(rune(inner[j])) {
		j++
	}
	name, op := inner[:j], inner[j:]
	if name == "" || !isNameStart(rune(name[0])) {
		return 0, fmt.Errorf("bad substitution ${%s}", inner)
	}
	if op == "" {
		v, err := x.value(name)
		b.WriteString(v)
		return end, err
	}
	v, set := x.lookup(name)
	var word string
	switch {
	case strings.HasPrefix(op, ":-"), strings.HasPrefix(op, ":+"):
		word, set = op[2:], set && v != ""
		op = op[1:2]
	case strings.HasPrefix(op, "-"), strings.HasPrefix(op, "+"):
		word, op = op[1:], op[:1]
	default:
		return 0, fmt.Errorf("${%s}: only ${NAME:-word}, ${NAME-word}, ${NAME:+word} and ${NAME+word} are supported", inner)
	}
	if (op == "-" && set) || (op == "+" && !set) {
		if op == "+" {
			v = ""
		}
		b.WriteString(v)
		return end, nil
	}
	w, err := x.expand(word)
	b.WriteString(w)
	return end, err
}

func (x *expander) value(name string) (string, error) {
	if v, ok := x.lookup(name); ok {
		return v, nil
	}
	return "", &notSetError{name}
}

// matchingBrace returns the index of the "}" that closes a "${" whose
// content starts at i, or -1.
func matchingBrace(rs []rune, i int) int {
	depth := 0
	for ; i < len(rs); i++ {
		switch rs[i] {
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return -1
}

func indexRune(rs []rune, from int, r rune) int {
	for i := from; i < len(rs); i++ {
		if rs[i] == r {
			return i
		}
	}
	return -1
}

func isNameStart(r rune) bool { return r == '_' || r < utf8.RuneSelf && unicode.IsLetter(r) }
func isNameRune(r rune) bool  { return isNameStart(r) || '0' <= r && r <= '9' }

// substituteArgs replaces $NAME and ${NAME} in a RUN's shell command where
// NAME is a build argument with a value: during a RUN, Docker has the build
// arguments in the environment, and warren's run steps have only the
// template's. The shell sees everything else, ENV variables included,
// unchanged. Quotes are not looked at: '$NAME' is replaced too.
func substituteArgs(s string, escape rune, arg func(name string) (string, bool)) string {
	var b strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		ch := rs[i]
		if ch == escape && i+1 < len(rs) {
			b.WriteRune(ch)
			b.WriteRune(rs[i+1])
			i++
			continue
		}
		if ch == '$' && i+1 < len(rs) {
			name, end := "", 0
			if isNameStart(rs[i+1]) {
				j := i + 1
				for j < len(rs) && isNameRune(rs[j]) {
					j++
				}
				name, end = string(rs[i+1:j]), j-1
			} else if rs[i+1] == '{' {
				if j := indexRune(rs, i+2, '}'); j > i+2 {
					name, end = string(rs[i+2:j]), j
				}
			}
			if v, ok := arg(name); ok && name != "" && validEnvName(name) {
				b.WriteString(v)
				i = end
				continue
			}
		}
		b.WriteRune(ch)
	}
	return b.String()
}

func validEnvName(s string) bool { return envKeyRE.MatchString(s) }

// hasHeredoc reports whether s holds a BuildKit heredoc (<<EOF, <<-EOF,
// <<"EOF"), which needs lines this parser reads as instructions. A bash
// here-string (<<<) is not one.
func hasHeredoc(s string) bool {
	for i := strings.Index(s, "<<"); i >= 0; {
		rest := s[i+2:]
		if (i == 0 || s[i-1] != '<') && !strings.HasPrefix(rest, "<") {
			rest = strings.TrimLeft(strings.TrimPrefix(rest, "-"), " \t")
			rest = strings.TrimLeft(rest, `"'`)
			if rest != "" && isNameStart([]rune(rest)[0]) {
				return true
			}
		}
		j := strings.Index(rest, "<<")
		if j < 0 {
			return false
		}
		i = len(s) - len(rest) + j
	}
	return false
}
