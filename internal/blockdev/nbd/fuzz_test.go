package nbd

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fuzzSession returns a func that connects a client to a server for a
// blockdev.File of testSize bytes, optionally chooses the export with
// NBD_OPT_EXPORT_NAME, then sends input and half-closes, reading whatever
// the server sends. It fails the test if ServeConn does not return within
// 10 s of the input's end.
func fuzzSession(f *testing.F) func(t *testing.T, negotiate bool, input []byte) {
	dev, _ := newFile(f, testSize)
	ln, err := net.Listen("unix", filepath.Join(sockDir(f), "sock"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ln.Close() })
	srv := NewServer(dev, Options{ExportName: "disk", HandshakeTimeout: 5 * time.Second})

	return func(t *testing.T, negotiate bool, input []byte) {
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.ServeConn(context.Background(), sc) }()

		c.SetDeadline(time.Now().Add(10 * time.Second))
		if negotiate {
			if _, err := io.ReadFull(c, make([]byte, 18)); err != nil {
				t.Fatalf("greeting: %v", err)
			}
			if _, err := c.Write(wire(uint32(clientFixedNewstyle|clientNoZeroes), uint64(magicOpt), uint32(optExportName), uint32(0))); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 10)); err != nil {
				t.Fatalf("NBD_OPT_EXPORT_NAME reply: %v", err)
			}
		}
		drained := make(chan struct{})
		go func() {
			io.Copy(io.Discard, c)
			close(drained)
		}()
		c.Write(input) // fails once the server has hung up
		c.(*net.UnixConn).CloseWrite()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("ServeConn still running 10 s after the input ended")
		}
		<-drained
	}
}

func FuzzNegotiate(f *testing.F) {
	flags := uint32(clientFixedNewstyle | clientNoZeroes)
	opt := func(o uint32, data ...any) []byte {
		d := wire(data...)
		return wire(uint64(magicOpt), o, uint32(len(d)), d)
	}
	for _, seed := range [][]byte{
		wire(flags, opt(optGo, uint32(0), uint16(0))),
		wire(flags, opt(optInfo, uint32(4), "disk", uint16(2), uint16(infoBlockSize), uint16(infoName)), opt(optGo, uint32(4), "disk", uint16(0))),
		wire(flags, opt(optList), opt(optAbort)),
		wire(flags, opt(8), opt(optExportName, "disk"), uint32(magicRequest), uint16(0), uint16(cmdRead), uint64(1), uint64(0), uint32(512)),
		wire(flags, uint64(magicOpt), uint32(optInfo), uint32(1<<20)),
		wire(flags, opt(optGo, uint32(1<<31), "disk", uint16(0))),
		wire(uint32(0), opt(optExportName)),
		wire(flags, uint64(0x1122334455667788)),
	} {
		f.Add(seed)
	}
	session := fuzzSession(f)
	f.Fuzz(func(t *testing.T, input []byte) { session(t, false, input) })
}

func FuzzRequests(f *testing.F) {
	req := func(typ, flags uint16, off uint64, n uint32, payload ...any) []byte {
		return wire(uint32(magicRequest), flags, typ, uint64(7), off, n, wire(payload...))
	}
	for _, seed := range [][]byte{
		req(cmdRead, 0, 0, 4096),
		wire(req(cmdWrite, cmdFlagFUA, 100, 10, "0123456789"), req(cmdRead, 0, 96, 20)),
		req(cmdWrite, 0, testSize-4, 8, "01234567"),
		wire(req(cmdTrim, 0, 100, 10000), req(cmdWriteZeroes, cmdFlagFUA|cmdFlagNoHole, 5000, 70000), req(cmdFlush, 0, 0, 0)),
		wire(req(cmdRead, 0, 0, 512), req(cmdDisc, 0, 0, 0), req(cmdRead, 0, 0, 512)),
		req(99, 0, 0, 0),
		req(cmdRead, 0, 0, maxPayload+1),
		req(cmdWrite, 1<<9, 1<<62, maxPayload),
		wire(uint32(0xdeadbeef), req(cmdRead, 0, 0, 1)),
	} {
		f.Add(seed)
	}
	session := fuzzSession(f)
	f.Fuzz(func(t *testing.T, input []byte) { session(t, true, input) })
}
