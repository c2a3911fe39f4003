// Package ident makes and checks the IDs warren hands out for sandboxes and
// snapshots: a short type prefix and 20 random base32 characters (100 bits),
// unguessable, so that an ID never tells one tenant about another's.
package ident

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

// randomLen is the number of random characters after the prefix.
const randomLen = 20

var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// New returns prefix followed by 20 random base32 characters.
func New(prefix string) string {
	b := make([]byte, 13) // 104 bits, cut to 100
	rand.Read(b)
	return prefix + encoding.EncodeToString(b)[:randomLen]
}

// Valid reports whether id is prefix followed by 20 base32 characters, as
// New makes them.
func Valid(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != randomLen {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}
