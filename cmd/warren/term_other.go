//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package main

import (
	"errors"
	"os"
)

// Elsewhere warren knows no terminal: `exec -t` sizes the remote one
// defaultPTY and forwards stdin as it reads it.

func isTerminal(*os.File) bool { return false }

func terminalSize(*os.File) (cols, rows uint32, ok bool) { return 0, 0, false }

func makeRaw(*os.File) (func(), error) { return nil, errors.New("no terminal support on this system") }

func noEcho(*os.File) (func(), error) { return nil, errors.New("no terminal support on this system") }

func notifyResize() (<-chan os.Signal, func()) { return nil, func() {} }
