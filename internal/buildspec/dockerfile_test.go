package buildspec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const dockerfile = `# syntax=docker/dockerfile:1.7
ARG BASE=default
ARG PYTHON=3

FROM ${BASE}@2
ARG PYTHON
ARG APP_HOME=/opt/app
LABEL org.opencontainers.image.source="https://example.com/app"
ENV LANG=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    APP_HOME=${APP_HOME}
ENV VENV $APP_HOME/venv

RUN apt-get update && \
    # keep the image small
    apt-get install -y --no-install-recommends python${PYTHON}-venv curl && \
    rm -rf /var/lib/apt/lists/*
WORKDIR $APP_HOME
COPY requirements.txt ./
RUN ["python3", "-m", "venv", "/opt/app/venv"]
RUN $VENV/bin/pip install -r requirements.txt
COPY --chown=user:user --chmod=0644 src/ ./src/
add config.toml /etc/app/
EXPOSE 8000
USER user
ENTRYPOINT ["/opt/app/venv/bin/python", "-m"]
CMD ["app.server", "--port", "8000"]
`

func TestParseDockerfile(t *testing.T) {
	got, err := ParseDockerfile([]byte(dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o644)
	want := &Spec{
		From: "default@2",
		Steps: []Step{
			{Kind: KindEnv, Line: 9, Env: map[string]string{"LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "APP_HOME": "/opt/app"}},
			{Kind: KindEnv, Line: 12, Env: map[string]string{"VENV": "/opt/app/venv"}},
			{Kind: KindRun, Line: 14, Shell: "apt-get update &&     apt-get install -y --no-install-recommends python3-venv curl &&     rm -rf /var/lib/apt/lists/*"},
			{Kind: KindWorkdir, Line: 18, Dir: "/opt/app"},
			{Kind: KindCopy, Line: 19, Src: "requirements.txt", Dest: "/opt/app/"},
			{Kind: KindRun, Line: 20, Argv: []string{"python3", "-m", "venv", "/opt/app/venv"}},
			{Kind: KindRun, Line: 21, Shell: "$VENV/bin/pip install -r requirements.txt"},
			{Kind: KindCopy, Line: 22, Src: "src", Dest: "/opt/app/src/", Owner: "user:user", Mode: &mode},
			{Kind: KindCopy, Line: 23, Src: "config.toml", Dest: "/etc/app/"},
			{Kind: KindUser, Line: 25, User: "user"},
		},
		Start: &Start{Command: "/opt/app/venv/bin/python -m app.server --port 8000", ReadyTimeout: DefaultReadyTimeout},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
		for i := range min(len(got.Steps), len(want.Steps)) {
			if !reflect.DeepEqual(got.Steps[i], want.Steps[i]) {
				t.Errorf("step %d: got %+v, want %+v", i+1, got.Steps[i], want.Steps[i])
			}
		}
	}
}

func TestParseDockerfileErrors(t *testing.T) {
	from := func(s string) string { return "FROM default\n" + s + "\n" }
	for _, tt := range []struct{ name, file, want string }{
		{"empty", "", "FROM: missing: the file must start from a warren template"},
		{"comments only", "# nothing\n\n", "FROM: missing: the file must start from a warren template"},
		{"image", "FROM python:3.12\n", `line 1: FROM: "python:3.12" is not a warren template (NAME or NAME@VERSION) nor a Debian suite (debian:SUITE); for an OCI image, use warren template create NAME --from-image python:3.12`},
		{"stage name", "FROM default AS build\n", "line 1: FROM: default AS build: naming a stage is not supported (multi-stage builds are not)"},
		{"second stage", "FROM default\nRUN true\nFROM other\n", "line 3: FROM: a second one: multi-stage builds are not supported"},
		{"platform", "FROM --platform=linux/arm64 default\n", "line 1: FROM: --platform is not supported"},
		{"from words", "FROM a b\n", "line 1: FROM: takes one warren template, NAME or NAME@VERSION"},
		{"before from", "# hi\nRUN true\nFROM default\n", "line 2: RUN: comes before FROM: the file must start from a warren template"},
		{"healthcheck", from("HEALTHCHECK CMD curl -f http://localhost/"), "line 2: HEALTHCHECK: not supported: give a readiness check as start.ready in a warren.yaml"},
		{"volume", from("VOLUME /data"), "line 2: VOLUME: not supported: a sandbox's disk is its own"},
		{"onbuild", from("ONBUILD RUN true"), "line 2: ONBUILD: not supported"},
		{"shell", from(`SHELL ["/bin/bash", "-c"]`), "line 2: SHELL: not supported: RUN's shell form runs /bin/sh -c"},
		{"stopsignal", from("STOPSIGNAL SIGTERM"), "line 2: STOPSIGNAL: not supported"},
		{"maintainer", from("MAINTAINER me"), "line 2: MAINTAINER: not supported (it is deprecated): use LABEL"},
		{"unknown", from("FETCH x"), "line 2: FETCH: unknown instruction: warren supports FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, CMD, ENTRYPOINT, LABEL and EXPOSE"},
		{"run mount", from("RUN --mount=type=cache,target=/root/.cache pip install x"), "line 2: RUN: --mount is not supported"},
		{"run heredoc", from("RUN <<EOF\napt-get update\nEOF"), "line 2: RUN: heredocs (<<EOF) are not supported: write the commands on continuation lines, or COPY a script and run it"},
		{"run heredoc later", from("RUN cat > /x <<-'EOT'"), "line 2: RUN: heredocs (<<EOF) are not supported: write the commands on continuation lines, or COPY a script and run it"},
		{"copy from", from("COPY --from=build /out /out"), "line 2: COPY: --from is not supported: multi-stage builds are not"},
		{"copy exclude", from("COPY --exclude=*.pyc . /app/"), "line 2: COPY: --exclude is not supported"},
		{"copy chmod", from("COPY --chmod=u+x run.sh /usr/local/bin/"), "line 2: COPY: --chmod=u+x: want octal digits, such as 0644"},
		{"copy wildcard", from("COPY *.py /app/"), "line 2: COPY: *.py: wildcards are not supported; name each file or directory"},
		{"copy sources", from("COPY a b /app"), "line 2: COPY: with more than one source, the destination must be a directory ending in /"},
		{"copy relative dest", from("COPY a app/"), `line 2: COPY: the relative destination "app/" needs an earlier absolute WORKDIR (warren cannot see the base template's)`},
		{"copy one word", from("COPY a"), "line 2: COPY: needs a source and a destination"},
		{"copy heredoc", from("COPY <<EOF /x"), "line 2: COPY: heredocs (<<EOF) are not supported: put the file in the build context"},
		{"copy escape", from("COPY ../secret /x"), `line 2: step 1 (copy): src "../secret" is outside the build context`},
		{"copy owner", from("COPY --chown=a.b c /d"), `line 2: step 1 (copy): owner "a.b": want USER, UID, USER:GROUP or UID:GID`},
		{"add url", from("ADD https://example.com/x.tgz /opt/"), "line 2: ADD: https://example.com/x.tgz: adding a URL is not supported; download it in a RUN step"},
		{"add git", from("ADD git@github.com:a/b.git /src/"), "line 2: ADD: git@github.com:a/b.git: adding a URL is not supported; download it in a RUN step"},
		{"add archive", from("ADD vendor.tar.gz /opt/"), "line 2: ADD: vendor.tar.gz: adding an archive is not supported (Docker would extract it); COPY it and extract it in a RUN step"},
		{"add checksum", from("ADD --checksum=sha256:00 a /b"), "line 2: ADD: --checksum is not supported"},
		{"env unset", from(`ENV PATH="/opt/bin:$PATH"`), "line 2: ENV: PATH: $PATH is not set earlier in this file (warren cannot see the base template's environment): set it with ENV or ARG, or write the value out"},
		{"env no value", from("ENV ONLY"), "line 2: ENV: ONLY needs a value: ENV NAME=VALUE"},
		{"env bad name", from("ENV 1X=y"), `line 2: ENV: "1X" is not a valid variable name`},
		{"env quote", from(`ENV A="x`), `line 2: ENV: A: unterminated double quote in "\"x"`},
		{"env substitution", from("ENV A=${B?unset}"), "line 2: ENV: A: ${B?unset}: only ${NAME:-word}, ${NAME-word}, ${NAME:+word} and ${NAME+word} are supported"},
		{"workdir relative", from("WORKDIR app"), `line 2: WORKDIR: the relative path "app" needs an earlier absolute WORKDIR (warren cannot see the base template's)`},
		{"workdir unset", from("WORKDIR $HOME/app"), "line 2: WORKDIR: $HOME is not set earlier in this file (warren cannot see the base template's environment): set it with ENV or ARG, or write the value out"},
		{"user group", from("USER 1000:1000"), "line 2: USER: 1000:1000: a group is not supported; give a user name or uid"},
		{"user empty", from("USER"), "line 2: USER: needs a user name or uid"},
		{"user invalid", from("USER Admin"), `line 2: step 1 (user): user "Admin": want a user name (a-z 0-9 _ -, up to 32 characters, not starting with a digit or -) or a numeric uid`},
		{"cmd empty", from("CMD"), "line 2: CMD: needs a command"},
		{"arg name", from("ARG 9=x"), `line 2: ARG: "9" is not a valid name`},
		{"escape", "# escape=x\nFROM default\n", `line 1: escape: "x": the escape character is \ or ` + "`"},
		{"too many steps", "FROM default\n" + strings.Repeat("RUN true\n", MaxSteps+1), "line 258: RUN: more than 256 steps"},
		{"too big", "FROM default\n#" + strings.Repeat("x", MaxFileSize), "the file is 1048590 bytes, at most 1048576"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseDockerfile([]byte(tt.file))
			if err == nil {
				t.Fatalf("accepted: %+v", s)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not an *Error", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n %s\nwant\n %s", err, tt.want)
			}
		})
	}
}

func TestDockerfileExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "E": ""}
	x := expander{escape: '\\', lookup: func(n string) (string, bool) { v, ok := vars[n]; return v, ok }}
	for in, want := range map[string]string{
		`$A`: "a", `${A}`: "a", `x${A}y`: "xay", `'$A'`: "$A", `"$A b"`: "a b", `\$A`: "$A", `$`: "$", `$1`: "$1",
		`${B:-d}`: "d", `${E:-d}`: "d", `${E-d}`: "", `${A:-d}`: "a", `${A:+s}`: "s", `${B:+s}`: "", `${E:+s}`: "", `${E+s}`: "s",
		`${B:-$A}`: "a", `${B:-"x y"}`: "x y", `"a\"b"`: `a"b`, `a\ b`: "a b", `"a\b"`: `a\b`, `'a\b'`: `a\b`, `é$A`: "éa",
	} {
		if got, err := x.expand(in); err != nil || got != want {
			t.Errorf("expand(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		`$B`:     "$B is not set earlier in this file (warren cannot see the base template's environment): set it with ENV or ARG, or write the value out",
		`${B}`:   "$B is not set earlier in this file (warren cannot see the base template's environment): set it with ENV or ARG, or write the value out",
		`'x`:     `unterminated single quote in "'x"`,
		`"x`:     `unterminated double quote in "\"x"`,
		`${A`:    `missing } in "${A"`,
		`${A?x}`: "${A?x}: only ${NAME:-word}, ${NAME-word}, ${NAME:+word} and ${NAME+word} are supported",
		`${1}`:   "bad substitution ${1}",
	} {
		if got, err := x.expand(in); err == nil || err.Error() != want {
			t.Errorf("expand(%s) = %q, %v; want the error %s", in, got, err, want)
		}
	}
}

func TestDockerfileStart(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{"CMD python3 app.py", "python3 app.py"},
		{`CMD ["python3", "app.py"]`, "python3 app.py"},
		{`CMD ["echo", "it's a test", ""]`, `echo 'it'"'"'s a test' ''`},
		{"CMD first\nCMD second", "second"},
		{`ENTRYPOINT ["tini", "--"]` + "\n" + `CMD ["serve"]`, "tini -- serve"},
		{`CMD serve --port 80` + "\n" + `ENTRYPOINT ["tini"]`, "tini /bin/sh -c 'serve --port 80'"},
		{`ENTRYPOINT serve` + "\n" + `CMD ["ignored"]`, "serve"},
		{`ENTRYPOINT ["serve"]`, "serve"},
		{"CMD []", ""},
		{"RUN true", ""},
	} {
		s, err := ParseDockerfile([]byte("FROM default\n" + tt.file + "\n"))
		if err != nil {
			t.Errorf("%q: %v", tt.file, err)
			continue
		}
		got := ""
		if s.Start != nil {
			got = s.Start.Command
			if s.Start.ReadyTimeout != DefaultReadyTimeout || s.Start.Ready != "" {
				t.Errorf("%q: start %+v", tt.file, s.Start)
			}
		}
		if got != tt.want {
			t.Errorf("%q: start command %q, want %q", tt.file, got, tt.want)
		}
	}
}

// steps parses a Dockerfile that must be valid and returns its steps
// without their lines.
func steps(t *testing.T, file string) []Step {
	t.Helper()
	s, err := ParseDockerfile([]byte(file))
	if err != nil {
		t.Fatalf("%q: %v", file, err)
	}
	for i := range s.Steps {
		s.Steps[i].Line = 0
	}
	return s.Steps
}

func TestDockerfileTranslation(t *testing.T) {
	mode := uint32(0o755)
	env := func(kv ...string) Step {
		st := Step{Kind: KindEnv, Env: map[string]string{}}
		for i := 0; i < len(kv); i += 2 {
			st.Env[kv[i]] = kv[i+1]
		}
		return st
	}
	for _, tt := range []struct {
		name, file string
		want       []Step
	}{
		{"env sees the env before it", "ENV A=1\nENV A=2 B=$A", []Step{env("A", "1"), env("A", "2", "B", "1")}},
		{"env quotes", `ENV MSG="hello world" Q='$A' ESC=a\ b EMPTY=`, []Step{env("MSG", "hello world", "Q", "$A", "ESC", "a b", "EMPTY", "")}},
		{"env legacy", `ENV GREETING hello "big" world`, []Step{env("GREETING", "hello big world")}},
		{"arg in run", "ARG V=1.2\nRUN echo $V ${V} \\$V $OTHER ${V:-x}", []Step{{Kind: KindRun, Shell: `echo 1.2 1.2 \$V $OTHER ${V:-x}`}}},
		{"env overrides arg", "ARG X=arg\nENV X=env\nRUN echo $X\nWORKDIR /$X", []Step{env("X", "env"), {Kind: KindRun, Shell: "echo $X"}, {Kind: KindWorkdir, Dir: "/env"}}},
		{"exec form is not expanded", "ARG V=1\nRUN [\"echo\", \"$V\"]", []Step{{Kind: KindRun, Argv: []string{"echo", "$V"}}}},
		{"arg without default", "ARG N\nRUN echo $N", []Step{{Kind: KindRun, Shell: "echo $N"}}},
		{"args on a line", "ARG A=1 B=$A\nWORKDIR /$A/$B", []Step{{Kind: KindWorkdir, Dir: "/1/1"}}},
		{"run not json", "RUN [ -f /etc/x ] && echo y", []Step{{Kind: KindRun, Shell: "[ -f /etc/x ] && echo y"}}},
		{"apt stays a run", "RUN apt-get update && apt-get install -y curl", []Step{{Kind: KindRun, Shell: "apt-get update && apt-get install -y curl"}}},
		{"workdir relative", "WORKDIR /app\nWORKDIR ../srv/./x", []Step{{Kind: KindWorkdir, Dir: "/app"}, {Kind: KindWorkdir, Dir: "/srv/x"}}},
		{"copy dot", "WORKDIR /app\nCOPY . .", []Step{{Kind: KindWorkdir, Dir: "/app"}, {Kind: KindCopy, Src: ".", Dest: "/app/"}}},
		{"copy absolute src", "COPY /etc/app.conf /etc/app.conf", []Step{{Kind: KindCopy, Src: "etc/app.conf", Dest: "/etc/app.conf"}}},
		{"copy json", `COPY ["my file", "b", "/d/"]`, []Step{{Kind: KindCopy, Src: "my file", Dest: "/d/"}, {Kind: KindCopy, Src: "b", Dest: "/d/"}}},
		{"copy dir dot", "COPY a /d/.", []Step{{Kind: KindCopy, Src: "a", Dest: "/d/"}}},
		{"copy flags", "ARG U=app\nCOPY --link --chmod=755 --chown=$U:$U bin/ /usr/local/bin/", []Step{{Kind: KindCopy, Src: "bin", Dest: "/usr/local/bin/", Mode: &mode, Owner: "app:app"}}},
		{"label and expose", "LABEL a=b c=\"d e\"\nEXPOSE 80/tcp 443", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := steps(t, "FROM default\n"+tt.file+"\n"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("steps\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestDockerfileLines(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       Step
	}{
		{"escape directive", "# escape=`\nFROM default\nRUN echo a `\n  b C:\\", Step{Kind: KindRun, Line: 3, Shell: `echo a   b C:\`}},
		{"directive after a comment", "# hello\n# escape=`\nFROM default\nRUN echo a `", Step{Kind: KindRun, Line: 4, Shell: "echo a `"}},
		{"crlf", "FROM default\r\nRUN a \\\r\n b\r\n", Step{Kind: KindRun, Line: 2, Shell: "a  b"}},
		{"blank and comment lines", "FROM default\nRUN a \\\n\n  # c\n\n  b", Step{Kind: KindRun, Line: 2, Shell: "a   b"}},
		{"continued at the end", "FROM default\nRUN a \\", Step{Kind: KindRun, Line: 2, Shell: "a"}},
		{"bom and case", "\ufefffrom default\nrun\ttrue", Step{Kind: KindRun, Line: 2, Shell: "true"}},
		{"syntax directive", "# syntax=docker/dockerfile:1\n# check=skip=all\nFROM default\nRUN x", Step{Kind: KindRun, Line: 4, Shell: "x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseDockerfile([]byte(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Steps) != 1 || !reflect.DeepEqual(s.Steps[0], tt.want) {
				t.Errorf("steps %+v, want [%+v]", s.Steps, tt.want)
			}
		})
	}
}
