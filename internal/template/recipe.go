package template

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
