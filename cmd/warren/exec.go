package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"warren/api"
	"warren/client"
)

func runExec(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("exec", "[flags] ID -- CMD [ARGS...]", `Run CMD in the sandbox ID, streaming its stdout and stderr here byte for byte
as they come, and exit with its exit status (124 when -timeout kills it, as
timeout(1) does). The command reads no stdin unless -i is given.

With -t the command runs on a terminal (a pty) the size of the local one,
its stdin forwarded, the local terminal in raw mode while it runs when stdin
is a terminal, and its resizes followed: warren exec -t ID -- bash.

Flags may come anywhere before the "--"; everything after it is CMD's command
line, its flags included.`)
	env := kvFlag{}
	fs.Var(env, "env", "set `K=V` in the command's environment (repeatable)")
	cwd := fs.String("cwd", "", "run in `DIR` (default: the user's home)")
	user := fs.String("user", "", "run as `USER` (default root)")
	timeout := fs.Duration("timeout", 0, "kill the command after this long and exit 124 (default: no limit)")
	interactive := fs.Bool("i", false, "forward stdin to the command")
	tty := fs.Bool("t", false, "run the command on a terminal (implies -i)")
	rest, err := parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	id, argv := rest[0], rest[1:]
	if len(argv) == 0 {
		return badUsage(fs, "missing command")
	}
	if *timeout < 0 {
		return badUsage(fs, "negative -timeout")
	}
	req := api.ExecRequest{Cmd: argv, Env: env.orNil(), Cwd: *cwd, User: *user}
	if *timeout > 0 {
		req.TimeoutMs = max(timeout.Milliseconds(), 1)
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	if *tty {
		size := c.ptySize()
		req.PTY = &size
		if f := c.localTerminal(); f != nil {
			restore, err := makeRaw(f)
			if err != nil {
				return fmt.Errorf("raw mode for the local terminal: %w", err)
			}
			defer restore()
		}
	}
	var res *api.ExecResult
	if *interactive || *tty {
		res, err = execInteractive(ctx, c, cl, id, req)
	} else {
		res, err = execStream(ctx, c, cl, id, req)
	}
	if err != nil {
		return err
	}
	if res.TimedOut {
		if *timeout > 0 {
			fmt.Fprintf(c.stderr, "warren: command timed out after %v\n", *timeout)
		} else {
			fmt.Fprintln(c.stderr, "warren: command timed out")
		}
		return exitError(124)
	}
	if res.ExitCode == 0 {
		return nil
	}
	if res.ExitCode < 0 || res.ExitCode > 255 {
		return exitError(255)
	}
	return exitError(res.ExitCode)
}

// execStream runs the command with no stdin, copying its output as it comes.
func execStream(ctx context.Context, c *cli, cl *client.Client, id string, req api.ExecRequest) (*api.ExecResult, error) {
	s, err := cl.ExecStream(ctx, id, req)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Copy(c.stdout, c.stderr)
}

// execInteractive runs the command in the background, attached with replay
// so that no early output is lost, while c.stdin streams to its stdin (on a
// pty: to its terminal, whose resizes it follows).
//
// The goroutine writing stdin is stopped by cancelling its context once the
// process has ended; it may stay blocked reading c.stdin (a terminal) until
// warren exits, which it does next.
func execInteractive(ctx context.Context, c *cli, cl *client.Client, id string, req api.ExecRequest) (*api.ExecResult, error) {
	// The start is not cut short by an interrupt: one that came while the
	// server was starting the process would leave it running unattended,
	// its PID unknown. It is killed once known.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startProcessTimeout)
	p, err := cl.StartProcess(sctx, id, req)
	cancel()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		kill(ctx, cl, id, p.PID)
		return nil, ctx.Err()
	}
	s, err := cl.AttachProcess(ctx, id, p.PID, true)
	if err != nil {
		kill(ctx, cl, id, p.PID)
		return nil, err
	}
	defer s.Close()
	stdinCtx, stopStdin := context.WithCancel(ctx)
	defer stopStdin()
	stdin, closeStdin := c.stdin, true
	if req.PTY != nil {
		stdin, closeStdin = c.ptyInput(), false
		defer c.followResize(ctx, cl, id, p.PID)()
	}
	stdinErr := make(chan error, 1)
	go func() { stdinErr <- cl.WriteStdin(stdinCtx, id, p.PID, stdin, closeStdin) }()

	res, err := s.Copy(c.stdout, c.stderr)
	if err != nil {
		if ctx.Err() != nil {
			kill(ctx, cl, id, p.PID)
		}
		return nil, err
	}
	// A process may end without reading all its input, as with a pipe in a
	// shell; a stdin failure is worth a warning only if it was not that.
	select {
	case err := <-stdinErr:
		if err != nil && !errors.Is(err, context.Canceled) && !api.IsCode(err, api.CodeConflict) && !api.IsCode(err, api.CodeNotFound) {
			fmt.Fprintf(c.stderr, "warren: %v\n", err)
		}
	default:
	}
	return res, nil
}

// startProcessTimeout bounds an interactive exec's start, which an
// interrupt does not cut short.
const startProcessTimeout = 30 * time.Second

// kill ends a background process that warren gives up on, so that it does
// not run on unattended; ctx may be cancelled already.
func kill(ctx context.Context, cl *client.Client, id string, pid uint32) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cl.SignalProcess(ctx, id, pid, "KILL")
}
