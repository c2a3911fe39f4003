package api

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Secrets are a tenant's credentials that sandboxes use without ever
// holding them: an egress rule (NetworkRule) names a secret in a header
// value as ${secrets.NAME}, and the node puts the value in the sandbox's
// matching requests as they leave (docs/NETWORK.md, "Secrets at egress").
// A value is write-only: it is set with PUT /v1/secrets/{name} and no
// route, log line, event or snapshot carries it back.
//
// Names are 1 to MaxSecretNameLen letters, digits, '.', '_' and '-',
// starting with a letter or a digit, and are stored in lower case (as
// E2B's are): "OpenAI-Key" and "openai-key" are the same secret. A name
// never starts with SecretIDPrefix; every route that takes a name takes
// the secret's ID too.
const (
	MaxSecretNameLen  = 128
	MaxSecretBytes    = 16 << 10 // a value's bytes
	MaxSecretMetadata = 32       // entries
	MaxSecretMetaKey  = 128      // bytes of a metadata key
	MaxSecretMetaVal  = 1024     // bytes of a metadata value
	MaxSecretMetaSize = 8 << 10  // a secret's metadata, keys and values
	MaxSecrets        = 1000     // per tenant
	SecretIDPrefix    = "sec_"
)

// Secret is what the API says of a secret: never its value.
type Secret struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Version counts the values the secret has had: 1 when created, one
	// more at each PUT that gives a value.
	Version   int               `json:"version"`
	Metadata  map[string]string `json:"metadata"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// SetSecretRequest is the body of PUT /v1/secrets/{name}, which creates the
// secret or gives it a new version. Metadata, when present, replaces the
// secret's; absent, an update keeps it.
type SetSecretRequest struct {
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// SecretList is the body of GET /v1/secrets, in name order.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// SecretName returns name in its stored form (lower case), or a
// CodeBadRequest *Error that says why it is not a secret name.
func SecretName(name string) (string, error) {
	bad := func(why string) error {
		return Errorf(CodeBadRequest, "bad secret name %.70q: %s", name, why)
	}
	lower := strings.ToLower(name)
	switch {
	case name == "" || len(name) > MaxSecretNameLen:
		return "", bad(fmt.Sprintf("it must be 1 to %d characters", MaxSecretNameLen))
	case strings.HasPrefix(lower, SecretIDPrefix):
		return "", bad("a name cannot start with \"" + SecretIDPrefix + "\", as secret IDs do")
	case !isAlnum(name[0]):
		return "", bad("it must start with a letter or a digit")
	}
	for i := range len(name) {
		if c := name[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return "", bad("only letters, digits, '.', '_' and '-' are allowed")
		}
	}
	return lower, nil
}

// CheckSecret returns nil if r may be stored, else a CodeBadRequest *Error
// that says why. The error never quotes the value.
func CheckSecret(r SetSecretRequest) error {
	switch {
	case r.Value == "":
		return Errorf(CodeBadRequest, "a secret's value cannot be empty")
	case len(r.Value) > MaxSecretBytes:
		return Errorf(CodeBadRequest, "a secret's value is %d bytes, at most %d", len(r.Value), MaxSecretBytes)
	case !utf8.ValidString(r.Value) || strings.ContainsAny(r.Value, "\r\n\x00"):
		// It goes into HTTP header values.
		return Errorf(CodeBadRequest, "a secret's value must be UTF-8 without CR, LF or NUL (it is sent in HTTP headers)")
	}
	return CheckSecretMetadata(r.Metadata)
}

// CheckSecretMetadata returns nil if m is within the bounds of a secret's
// metadata.
func CheckSecretMetadata(m map[string]string) error {
	if len(m) > MaxSecretMetadata {
		return Errorf(CodeBadRequest, "a secret's metadata has %d entries, at most %d", len(m), MaxSecretMetadata)
	}
	size := 0
	for k, v := range m {
		switch {
		case k == "" || len(k) > MaxSecretMetaKey:
			return Errorf(CodeBadRequest, "secret metadata key %.70q: 1 to %d bytes", k, MaxSecretMetaKey)
		case len(v) > MaxSecretMetaVal:
			return Errorf(CodeBadRequest, "secret metadata %.70q: its value is over %d bytes", k, MaxSecretMetaVal)
		}
		size += len(k) + len(v)
	}
	if size > MaxSecretMetaSize {
		return Errorf(CodeBadRequest, "a secret's metadata is %d bytes, at most %d", size, MaxSecretMetaSize)
	}
	return nil
}
