package reqid

import (
	"context"
	"testing"
)

func TestValid(t *testing.T) {
	for _, id := range []string{New(), New(), "0123456789abcdef"} {
		if !Valid(id) {
			t.Errorf("Valid(%q) = false, want true", id)
		}
	}
	for _, id := range []string{"", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0",
		"0123456789abcde\n", "0123456789abcdeg", "01234567 9abcdef", "0123456789abcdé"} {
		if Valid(id) {
			t.Errorf("Valid(%q) = true, want false", id)
		}
	}
	if a, b := New(), New(); a == b {
		t.Errorf("two new IDs are both %q", a)
	}
}

func TestContext(t *testing.T) {
	if got := From(context.Background()); got != "" {
		t.Errorf("From of a context without one: %q", got)
	}
	if got := From(With(context.Background(), "0123456789abcdef")); got != "0123456789abcdef" {
		t.Errorf("From(With(id)) = %q", got)
	}
}
