package template

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// recipe is how to make a template's root filesystem with debootstrap.
type recipe struct {
	name    string
	suite   string
	variant string
	include []string
}

// recipes are the recipes Build knows, by name.
var recipes = map[string]recipe{
	"default": {
		name:    "default",
		suite:   "bookworm",
		variant: "minbase",
		include: []string{"python3", "ca-certificates", "coreutils", "procps", "git", "curl"},
	},
}

// A suite's template, debian-SUITE, is built from the default recipe's
// packages on that Debian suite: a base for builds that start from a
// suite (docs/TEMPLATES.md).
const suitePrefix = "debian-"

var suitePattern = regexp.MustCompile(`^[a-z]{2,20}$`)

// SuiteTemplate is the name of the built-in template of Debian suite, or
// an error wrapping ErrUnknownRecipe for what cannot be a suite.
func SuiteTemplate(suite string) (string, error) {
	if !suitePattern.MatchString(suite) {
		return "", fmt.Errorf("%w: %q is not a Debian suite's code name", ErrUnknownRecipe, suite)
	}
	return suitePrefix + suite, nil
}

// Suite is the Debian suite that built-in template name is made of (its
// recipe's): bookworm for default, SUITE for debian-SUITE; false for a
// name no recipe makes. Template builds take an apt step's suite from
// here, never from the sandbox's /etc/os-release.
func Suite(name string) (string, bool) {
	if suite, ok := strings.CutPrefix(name, suitePrefix); ok && suitePattern.MatchString(suite) {
		return suite, true
	}
	if r, ok := recipes[name]; ok {
		return r.suite, true
	}
	return "", false
}

func suiteRecipe(suite string) recipe {
	r := recipes["default"]
	r.name, r.suite = suitePrefix+suite, suite
	return r
}

// debootstrapArgs are the arguments that install the recipe into rootfs.
func (r recipe) debootstrapArgs(rootfs, mirror string) []string {
	return []string{
		"--variant=" + r.variant,
		"--include=" + strings.Join(r.include, ","),
		r.suite, rootfs, mirror,
	}
}

// cacheKey names the cached root filesystem: it changes whenever what
// debootstrap would install changes, and only then (the mirror is not part
// of it: any mirror of the suite serves the same packages).
func (r recipe) cacheKey() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "rootfs v1\nsuite %s\nvariant %s\ninclude %s\n",
		r.suite, r.variant, strings.Join(r.include, ",")))
	return hex.EncodeToString(sum[:8])
}
