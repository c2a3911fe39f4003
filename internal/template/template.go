// Package template builds and catalogs templates: the immutable base disk
// images (raw, sparse ext4) that sandbox root disks are cloned from.
//
// A template is built from a recipe (a Debian suite and package list,
// installed with debootstrap) plus what every sandbox needs: the guest agent,
// an unprivileged user, an identity-neutral /etc. The catalog keeps each
// template as NAME.img with NAME.json beside it, in the disk pool, so that
// clones of it are reflinks.
//
// It is not for sandbox disks, snapshots or layers (the disk and snapshot
// packages handle those), and it does not run sandboxes.
package template

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNotFound is returned when a template does not exist (or is incomplete).
var ErrNotFound = errors.New("template not found")

// ErrUnknownRecipe is returned when asked to build a template for which no
// recipe exists.
var ErrUnknownRecipe = errors.New("unknown template recipe")

// ErrInvalidName is returned for a name that ValidName rejects.
var ErrInvalidName = errors.New("invalid template name")

// Info describes a built template.
type Info struct {
	Name string `json:"name"`
	// Path is the image file.
	Path string `json:"path"`
	// SizeBytes is the apparent size of the image, the disk size a sandbox
	// sees before it grows its clone.
	SizeBytes int64 `json:"size_bytes"`
	// UsedBytes is what the image occupies on the host (it is sparse).
	UsedBytes int64     `json:"used_bytes"`
	BuiltAt   time.Time `json:"built_at"`
	// Recipe is the name of the recipe it was built from.
	Recipe string `json:"recipe"`
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidName checks that name can name a template: 1 to 63 characters from
// [a-z0-9._-], starting with a letter or digit. The error wraps
// ErrInvalidName.
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%w %q: want 1-63 characters of a-z 0-9 . _ -, starting with a-z or 0-9", ErrInvalidName, name)
	}
	return nil
}

// ParseRef splits a tenant's template reference, NAME[@VERSION]; version
// is 0 for the newest.
func ParseRef(ref string) (name string, version int64, err error) {
	name, v, pinned := strings.Cut(ref, "@")
	if err := ValidName(name); err != nil {
		return "", 0, fmt.Errorf("template: %w", err)
	}
	if pinned {
		version, err = strconv.ParseInt(v, 10, 64)
		if err != nil || version < 1 {
			return "", 0, fmt.Errorf("template %q: the version after @ must be a positive integer", ref)
		}
	}
	return name, version, nil
}

// Recipes lists the names of the recipes Build knows, sorted. A template is
// built from the recipe of the same name.
func Recipes() []string {
	names := make([]string, 0, len(recipes))
	for name := range recipes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// IsRecipe reports whether name is a recipe's, one Build knows: a
// tenant's template may not take it.
func IsRecipe(name string) bool {
	_, err := lookupRecipe(name)
	return err == nil
}
