package nbd

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

const testSize = 1 << 20

func TestNegotiate(t *testing.T) {
	greet := func(cl *client) { cl.write(uint32(clientFixedNewstyle | clientNoZeroes)) }
	// usable checks the session goes on: GO, then a READ.
	usable := func(cl *client) {
		cl.t.Helper()
		cl.option(optGo, wire(uint32(0), uint16(0)))
		for typ := uint32(0); typ != repAck; {
			if typ, _ = cl.optReply(optGo); typ != repAck && typ != repInfo {
				cl.t.Fatalf("NBD_OPT_GO: reply %#x", typ)
			}
		}
		if errno, _ := cl.do(cmdRead, 0, 0, 4096, nil); errno != 0 {
			cl.t.Fatalf("READ after negotiation: error %d", errno)
		}
	}
	expect := func(cl *client, opt, want uint32) []byte {
		cl.t.Helper()
		typ, data := cl.optReply(opt)
		if typ != want {
			cl.t.Fatalf("option %d: reply %#x %q, want %#x", opt, typ, data, want)
		}
		return data
	}
	tests := []struct {
		name string
		opts Options
		run  func(*client)
	}{
		{name: "unknown client flags", run: func(cl *client) {
			cl.write(uint32(1 << 5))
			cl.closed()
		}},
		{name: "bad option magic", run: func(cl *client) {
			greet(cl)
			cl.write(uint64(0x1234), uint32(optGo), uint32(0))
			cl.closed()
		}},
		{name: "option too big", run: func(cl *client) {
			greet(cl)
			cl.write(uint64(magicOpt), uint32(optInfo), uint32(maxOptionLen+1))
			expect(cl, optInfo, repErrTooBig)
			cl.closed()
		}},
		{name: "export name too big", run: func(cl *client) {
			greet(cl)
			cl.write(uint64(magicOpt), uint32(optExportName), uint32(1<<30))
			cl.closed()
		}},
		{name: "too many options", run: func(cl *client) {
			greet(cl)
			for range maxOptions {
				cl.option(99, nil)
				expect(cl, 99, repErrUnsup)
			}
			cl.closed() // the last option allowed did not choose the export
		}},
		{name: "last option allowed chooses the export", run: func(cl *client) {
			greet(cl)
			for range maxOptions - 1 {
				cl.option(99, nil)
				expect(cl, 99, repErrUnsup)
			}
			usable(cl)
		}},
		{name: "unknown option", run: func(cl *client) {
			greet(cl)
			cl.option(99, []byte("whatever"))
			expect(cl, 99, repErrUnsup)
			usable(cl)
		}},
		{name: "structured replies refused", run: func(cl *client) {
			greet(cl)
			cl.option(8, nil) // NBD_OPT_STRUCTURED_REPLY
			expect(cl, 8, repErrUnsup)
			usable(cl)
		}},
		{name: "list", run: func(cl *client) {
			greet(cl)
			cl.option(optList, nil)
			if got, want := expect(cl, optList, repServer), wire(uint32(4), "disk"); !bytes.Equal(got, want) {
				cl.t.Fatalf("NBD_REP_SERVER %q, want %q", got, want)
			}
			expect(cl, optList, repAck)
			cl.option(optList, []byte("x"))
			expect(cl, optList, repErrInvalid)
			usable(cl)
		}},
		{name: "info", run: func(cl *client) {
			greet(cl)
			cl.option(optInfo, wire(uint32(4), "disk", uint16(3), uint16(infoBlockSize), uint16(infoName), uint16(2)))
			want := [][]byte{
				wire(uint16(infoExport), uint64(testSize), uint16(transmissionFlags)),
				wire(uint16(infoName), "disk"),
				wire(uint16(infoBlockSize), uint32(1), uint32(4096), uint32(32<<20)),
			}
			for _, w := range want {
				if got := expect(cl, optInfo, repInfo); !bytes.Equal(got, w) {
					cl.t.Fatalf("NBD_REP_INFO %x, want %x", got, w)
				}
			}
			expect(cl, optInfo, repAck)
			usable(cl)
		}},
		{name: "info unknown export", run: func(cl *client) {
			greet(cl)
			cl.option(optInfo, wire(uint32(5), "other", uint16(0)))
			expect(cl, optInfo, repErrUnknown)
			cl.option(optGo, wire(uint32(5), "other", uint16(0)))
			expect(cl, optGo, repErrUnknown)
			usable(cl)
		}},
		{name: "info malformed", run: func(cl *client) {
			greet(cl)
			for _, data := range [][]byte{
				nil,
				wire(uint32(5), "disk", uint16(0)), // name longer than the data
				wire(uint32(4), "disk", uint16(2), uint16(0)),       // fewer requests than counted
				wire(uint32(4), "disk", uint16(0), uint16(0)),       // more
				wire(uint32(0xffffffff), "disk", uint16(0), "tail"), // huge name length
			} {
				cl.option(optGo, data)
				expect(cl, optGo, repErrInvalid)
			}
			usable(cl)
		}},
		{name: "export name", run: func(cl *client) {
			greet(cl)
			cl.option(optExportName, []byte("disk"))
			if got, want := cl.read(10), wire(uint64(testSize), uint16(transmissionFlags)); !bytes.Equal(got, want) {
				cl.t.Fatalf("NBD_OPT_EXPORT_NAME reply %x, want %x", got, want)
			}
			if errno, _ := cl.do(cmdRead, 0, 0, 512, nil); errno != 0 {
				cl.t.Fatalf("READ: error %d", errno)
			}
		}},
		{name: "export name with zeroes", run: func(cl *client) {
			cl.write(uint32(clientFixedNewstyle))
			cl.option(optExportName, nil)
			want := append(wire(uint64(testSize), uint16(transmissionFlags)), make([]byte, 124)...)
			if got := cl.read(len(want)); !bytes.Equal(got, want) {
				cl.t.Fatalf("NBD_OPT_EXPORT_NAME reply %x, want %x", got, want)
			}
			if errno, _ := cl.do(cmdRead, 0, 0, 512, nil); errno != 0 {
				cl.t.Fatalf("READ: error %d", errno)
			}
		}},
		{name: "export name unknown", run: func(cl *client) {
			greet(cl)
			cl.option(optExportName, []byte("other"))
			cl.closed()
		}},
		{name: "abort", run: func(cl *client) {
			greet(cl)
			cl.option(optAbort, nil)
			expect(cl, optAbort, repAck)
			cl.closed()
		}},
		{name: "handshake timeout", opts: Options{HandshakeTimeout: 100 * time.Millisecond}, run: func(cl *client) {
			greet(cl)
			cl.closed()
		}},
		{name: "handshake timeout between options", opts: Options{HandshakeTimeout: 300 * time.Millisecond}, run: func(cl *client) {
			greet(cl)
			for range 3 {
				cl.option(99, nil)
				expect(cl, 99, repErrUnsup)
				time.Sleep(50 * time.Millisecond) // a slow client, but within the deadline
			}
			cl.write(uint64(magicOpt), uint32(99), uint32(10), "12345") // half an option
			cl.closed()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev, _ := newFile(t, testSize)
			tt.opts.ExportName = "disk"
			s := serve(t, dev, tt.opts)
			tt.run(dial(t, s.sock))
		})
	}
}

// The replies are framed as the spec says: NBD_REP_INFO's data starts with
// the info type, and the option reply header is 20 bytes.
func TestOptionReplyFraming(t *testing.T) {
	dev, _ := newFile(t, testSize)
	s := serve(t, dev, Options{})
	cl := dial(t, s.sock)
	cl.write(uint32(clientFixedNewstyle | clientNoZeroes))
	cl.option(optGo, wire(uint32(0), uint16(0)))
	h := cl.read(20)
	if got := binary.BigEndian.Uint32(h[16:]); got != 12 {
		t.Fatalf("NBD_INFO_EXPORT reply of %d bytes, want 12", got)
	}
}
