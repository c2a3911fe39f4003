package api

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
//
// Exactly one of Cmd (an argv, run directly) and Shell (a command line, run
// by /bin/sh -c) is set. A command that does not exist ends with exit code
// 127, as in a shell.
type ExecRequest struct {
	Cmd   []string          `json:"cmd,omitempty"`
	Shell string            `json:"shell,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	User  string            `json:"user,omitempty"` // default root
	// TimeoutMs kills the command after this long (exit code 137, timed_out).
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	Stdin     []byte `json:"stdin,omitempty"` // base64 in JSON; written, then stdin is closed
	// Background starts the command and answers at once with its pid (202);
	// the process endpoints attach to it, feed its stdin, signal it or wait
	// for it. Its stdin stays open until closed.
	Background bool   `json:"background,omitempty"`
	Tag        string `json:"tag,omitempty"`
	// Stream answers with a stream of ExecEvent, one JSON object a line
	// (application/x-ndjson), instead of one ExecResult at the end.
	Stream bool `json:"stream,omitempty"`
	// OutputEncoding is how ExecResult carries stdout and stderr: "utf8"
	// (the default: text, with U+FFFD for bytes that are not UTF-8) or
	// "base64" (exact bytes, a third larger; JSON would write a control
	// byte such as NUL as six).
	OutputEncoding string `json:"output_encoding,omitempty"`
	// PTY runs the command on a pseudo-terminal of this size: its stdin,
	// stdout and stderr are the terminal, TERM is xterm-256color unless Env
	// sets it, and its output comes as events of type "pty" (what a
	// terminal shows: both streams, with the terminal's echo and line
	// endings). Such an exec must stream or run in the background; stdin
	// routes type into the terminal, and resize changes its size.
	PTY *PTYSize `json:"pty,omitempty"`
}

// PTYSize is a pseudo-terminal's size, each 1 to MaxPTYSize; it is also the
// body of POST /v1/sandboxes/{id}/processes/{pid}/resize.
type PTYSize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

// MaxPTYSize bounds PTYSize's columns and rows.
const MaxPTYSize = 1000

// Output encodings of ExecRequest.OutputEncoding.
const (
	EncodingUTF8   = "utf8"
	EncodingBase64 = "base64"
)

// ExecResult is the answer to a foreground, non-streaming exec, and to a
// process wait. Output that is not valid UTF-8 is shown with U+FFFD in
// Stdout/Stderr; use streaming for exact bytes.
type ExecResult struct {
	PID        uint32  `json:"pid"`
	ExitCode   int     `json:"exit_code"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	Status     string  `json:"status,omitempty"` // e.g. "exit status 1", "signal: killed"
	DurationMs float64 `json:"duration_ms"`
	// Truncated is set when the output exceeded the server's limit for a
	// non-streaming exec (--exec-output-max, per stream) and was cut.
	Truncated bool `json:"truncated,omitempty"`
	// Encoding is the encoding of Stdout and Stderr (ExecRequest's
	// OutputEncoding; empty for utf8).
	Encoding string `json:"encoding,omitempty"`
}

// ExecEvent types.
const (
	EventStart  = "start"
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventPTY    = "pty" // the output of a process on a pseudo-terminal
	EventEnd    = "end"
	EventError  = "error"
)

// ExecEvent is one line of a streamed exec or attach. Data carries exact
// bytes (base64 in JSON).
type ExecEvent struct {
	Type       string  `json:"type"`
	PID        uint32  `json:"pid,omitempty"`
	Data       []byte  `json:"data,omitempty"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	Status     string  `json:"status,omitempty"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// StartedProcess is the answer to a background exec.
type StartedProcess struct {
	PID uint32 `json:"pid"`
	Tag string `json:"tag,omitempty"`
}

// Process is one process the sandbox's agent started, running or ended.
type Process struct {
	PID      uint32   `json:"pid"`
	Tag      string   `json:"tag,omitempty"`
	Cmd      string   `json:"cmd"`
	Args     []string `json:"args,omitempty"`
	Running  bool     `json:"running"`
	ExitCode *int     `json:"exit_code,omitempty"`
}

// SignalRequest is the body of POST /v1/sandboxes/{id}/processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"` // TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT
}

// Process states, for the state filter of GET /v1/sandboxes/{id}/processes.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// ProcessList is the answer to GET /v1/sandboxes/{id}/processes, by pid.
type ProcessList struct {
	Processes     []Process `json:"processes"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}
