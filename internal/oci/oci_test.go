package oci

import "testing"

func TestShellJoin(t *testing.T) {
	for _, c := range []struct {
		words []string
		want  string
	}{
		{nil, ""},
		{[]string{"/bin/sh"}, "/bin/sh"},
		{[]string{"python3", "-c", "print('hi')"}, `python3 -c 'print('\''hi'\'')'`},
		{[]string{"/bin/sh", "-c", "echo $HOME && ls"}, `/bin/sh -c 'echo $HOME && ls'`},
		{[]string{"a b", "", "x=1", "--flag=a,b:c@d%"}, `'a b' '' x=1 --flag=a,b:c@d%`},
		{[]string{"*", "~", "#", "é"}, `'*' '~' '#' 'é'`},
	} {
		if got := ShellJoin(c.words); got != c.want {
			t.Errorf("ShellJoin(%q) = %s, want %s", c.words, got, c.want)
		}
	}
}
