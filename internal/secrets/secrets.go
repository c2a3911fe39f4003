// Package secrets keeps tenants' secrets (api.Secret) sealed at rest and
// opens them for the node that puts them in a sandbox's requests at
// egress (docs/NETWORK.md, "Secrets at egress").
//
// A value is sealed with AES-256-GCM under the operator's key (Box), bound
// to its tenant, its secret's ID and its version, so that a sealed value
// copied to another row or tenant does not open. The store holds only the
// sealed bytes; the key lives in a file or an environment variable apart
// from the database. Nothing here logs, formats or returns a value but
// Vault.Resolve, whose caller is the egress interceptor.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"warren/internal/atomicfile"
)

// KeyEnv is the environment variable that may hold the key, 64 hex digits,
// instead of a file.
const KeyEnv = "WARREN_SECRETS_KEY"

// Box seals and opens values under one key.
type Box struct {
	aead cipher.AEAD
	id   [8]byte // the first bytes of the key's SHA-256, stored with each value
}

// format is the first byte of a sealed value.
const format = 1

// NewBox makes a Box over a 32-byte key.
func NewBox(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("a secrets key is 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	b := &Box{aead: aead}
	sum := sha256.Sum256(key)
	copy(b.id[:], sum[:])
	return b, nil
}

// LoadKey returns the Box of the key in $WARREN_SECRETS_KEY, else in the
// file at path (64 hex digits). When neither holds one and create is set,
// it makes a new key and writes it to path (0600), as a single machine's
// first start does; a fleet's operator gives every control replica the
// same key.
func LoadKey(path string, create bool) (*Box, error) {
	if v := strings.TrimSpace(os.Getenv(KeyEnv)); v != "" {
		return parseKey(v, "$"+KeyEnv)
	}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return parseKey(strings.TrimSpace(string(b)), path)
	case !errors.Is(err, os.ErrNotExist) || !create:
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	if err := atomicfile.Write(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return NewBox(key)
}

func parseKey(v, where string) (*Box, error) {
	key, err := hex.DecodeString(v)
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("secrets key in %s: want 64 hex digits", where)
	}
	return NewBox(key)
}

// aad binds a sealed value to its place.
func aad(tenant, id string, version int) []byte {
	return fmt.Appendf(nil, "warren secret\x00%s\x00%s\x00%d", tenant, id, version)
}

// Seal seals value for tenant's secret id at version.
func (b *Box) Seal(tenant, id string, version int, value string) []byte {
	out := make([]byte, 0, 1+len(b.id)+b.aead.NonceSize()+len(value)+b.aead.Overhead())
	out = append(out, format)
	out = append(out, b.id[:]...)
	nonce := make([]byte, b.aead.NonceSize())
	rand.Read(nonce)
	out = append(out, nonce...)
	return b.aead.Seal(out, nonce, []byte(value), aad(tenant, id, version))
}

// ErrOtherKey is a value sealed under another key than the Box's.
var ErrOtherKey = errors.New("the secret was sealed with another key than this server's")

// Open opens what Seal sealed for the same tenant, id and version. Its
// errors never carry the value.
func (b *Box) Open(tenant, id string, version int, sealed []byte) (string, error) {
	head := 1 + len(b.id) + b.aead.NonceSize()
	switch {
	case len(sealed) < head+b.aead.Overhead() || sealed[0] != format:
		return "", errors.New("the sealed secret is not in a known format")
	case string(sealed[1:1+len(b.id)]) != string(b.id[:]):
		return "", ErrOtherKey
	}
	plain, err := b.aead.Open(nil, sealed[1+len(b.id):head], sealed[head:], aad(tenant, id, version))
	if err != nil {
		return "", errors.New("the sealed secret does not open: it was altered or moved")
	}
	return string(plain), nil
}
