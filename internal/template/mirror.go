package template

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// defaultMirror is used when the host's apt sources name no mirror for the
// suite.
const defaultMirror = "http://deb.debian.org/debian"

// aptMirror returns the first mirror that the apt configuration under etcApt
// (normally /etc/apt) uses for suite, or defaultMirror. It reads
// sources.list, then sources.list.d/*.list and *.sources in name order, as
// apt does.
func aptMirror(etcApt, suite string) string {
	if m := mirrorFromOneLine(readText(filepath.Join(etcApt, "sources.list")), suite); m != "" {
		return m
	}
	// Glob's matches are sorted; its only error is a malformed pattern.
	parts, _ := filepath.Glob(filepath.Join(etcApt, "sources.list.d", "*"))
	for _, p := range parts {
		var m string
		switch filepath.Ext(p) {
		case ".list":
			m = mirrorFromOneLine(readText(p), suite)
		case ".sources":
			m = mirrorFromDeb822(readText(p), suite)
		}
		if m != "" {
			return m
		}
	}
	return defaultMirror
}

// readText returns the file's contents, or "" if it cannot be read: a
// missing or unreadable sources file just names no mirror.
func readText(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// mirrorFromOneLine returns the URI of the first "deb" line for suite in the
// one-line sources.list format ("deb [options] URI suite components"), or "".
func mirrorFromOneLine(text, suite string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			// Options: [key=value ...], possibly spread over several fields.
			end := slices.IndexFunc(f, func(s string) bool { return strings.HasSuffix(s, "]") })
			if end < 0 {
				continue
			}
			f = f[end+1:]
		}
		if len(f) >= 2 && f[1] == suite && usableURI(f[0]) {
			return f[0]
		}
	}
	return ""
}

// mirrorFromDeb822 returns the first URI of the first enabled "deb" stanza
// for suite in the deb822 .sources format, or "".
func mirrorFromDeb822(text, suite string) string {
	for _, st := range deb822Stanzas(text) {
		if strings.EqualFold(st["enabled"], "no") ||
			!slices.Contains(strings.Fields(st["types"]), "deb") ||
			!slices.Contains(strings.Fields(st["suites"]), suite) {
			continue
		}
		for _, uri := range strings.Fields(st["uris"]) {
			if usableURI(uri) {
				return uri
			}
		}
	}
	return ""
}

// deb822Stanzas splits deb822 text into stanzas of fields, keyed by the
// lower-cased field name; continuation lines join their field's value.
func deb822Stanzas(text string) []map[string]string {
	var stanzas []map[string]string
	var cur map[string]string
	var last string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			cur = nil
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t':
			if cur != nil && last != "" {
				cur[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			if cur == nil {
				cur = map[string]string{}
				stanzas = append(stanzas, cur)
			}
			last = strings.ToLower(strings.TrimSpace(k))
			cur[last] = strings.TrimSpace(v)
		}
	}
	return stanzas
}

// usableURI reports whether debootstrap can fetch from uri.
func usableURI(uri string) bool {
	for _, scheme := range []string{"http://", "https://", "file:/"} {
		if strings.HasPrefix(uri, scheme) {
			return true
		}
	}
	return false
}

// AptMirror returns the mirror the host's apt configuration uses for
// suite (sources under /etc/apt), or the default one.
func AptMirror(suite string) string { return aptMirror("/etc/apt", suite) }
