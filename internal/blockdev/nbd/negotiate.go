package nbd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

var errAborted = errors.New("client aborted negotiation")

// negotiate runs the fixed newstyle handshake and option haggling, within
// HandshakeTimeout. It returns true once the client has chosen the export
// and transmission begins; false with a nil error if the client aborted.
func (cn *conn) negotiate(ctx context.Context) (bool, error) {
	cn.c.SetDeadline(time.Now().Add(cn.s.opts.HandshakeTimeout))
	stop := context.AfterFunc(ctx, func() { cn.c.SetDeadline(time.Now()) })
	ok, err := cn.haggle()
	if !stop() {
		return false, ctx.Err()
	}
	if errors.Is(err, errAborted) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("negotiate: %w", err)
	}
	// Transmission has no deadline: QEMU leaves an idle disk's connection
	// quiet for as long as it likes.
	cn.c.SetDeadline(time.Time{})
	return ok, nil
}

func (cn *conn) haggle() (bool, error) {
	greeting := binary.BigEndian.AppendUint64(nil, magicInit)
	greeting = binary.BigEndian.AppendUint64(greeting, magicOpt)
	greeting = binary.BigEndian.AppendUint16(greeting, flagFixedNewstyle|flagNoZeroes)
	if _, err := cn.c.Write(greeting); err != nil {
		return false, err
	}
	var b [16]byte
	if _, err := io.ReadFull(cn.r, b[:4]); err != nil {
		return false, fmt.Errorf("read client flags: %w", err)
	}
	flags := binary.BigEndian.Uint32(b[:4])
	if flags&^(clientFixedNewstyle|clientNoZeroes) != 0 {
		return false, fmt.Errorf("unknown client flags %#x", flags)
	}
	cn.noZeroes = flags&clientNoZeroes != 0

	for range maxOptions {
		if _, err := io.ReadFull(cn.r, b[:]); err != nil {
			return false, fmt.Errorf("read option: %w", err)
		}
		if magic := binary.BigEndian.Uint64(b[:8]); magic != magicOpt {
			return false, fmt.Errorf("bad option magic %#x", magic)
		}
		opt, n := binary.BigEndian.Uint32(b[8:12]), binary.BigEndian.Uint32(b[12:16])
		if n > maxOptionLen {
			// The data is never read, so the stream cannot go on.
			if opt != optExportName {
				cn.optReply(opt, repErrTooBig, nil)
			}
			return false, fmt.Errorf("option %d: %d bytes of data, limit %d", opt, n, maxOptionLen)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(cn.r, data); err != nil {
			return false, fmt.Errorf("read option %d: %w", opt, err)
		}
		done, err := cn.option(opt, data)
		if done || err != nil {
			return done, err
		}
	}
	return false, fmt.Errorf("more than %d options", maxOptions)
}

// option answers one option; it returns true when transmission begins.
func (cn *conn) option(opt uint32, data []byte) (bool, error) {
	switch opt {
	case optExportName:
		// No error can be sent in reply to EXPORT_NAME: an unknown name
		// closes the connection.
		if !cn.s.exports(string(data)) {
			return false, fmt.Errorf("unknown export %q", data)
		}
		reply := binary.BigEndian.AppendUint64(nil, uint64(cn.s.dev.Size()))
		reply = binary.BigEndian.AppendUint16(reply, transmissionFlags)
		if !cn.noZeroes {
			reply = append(reply, make([]byte, 124)...)
		}
		_, err := cn.c.Write(reply)
		return err == nil, err
	case optAbort:
		// The client may well have closed already; the reply is a courtesy.
		cn.optReply(opt, repAck, nil)
		return false, errAborted
	case optList:
		if len(data) != 0 {
			return false, cn.optReply(opt, repErrInvalid, nil)
		}
		name := cn.s.opts.ExportName
		server := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
		if err := cn.optReply(opt, repServer, append(server, name...)); err != nil {
			return false, err
		}
		return false, cn.optReply(opt, repAck, nil)
	case optInfo, optGo:
		return cn.info(opt, data)
	default:
		// NBD_OPT_STRUCTURED_REPLY among others: simple replies only.
		return false, cn.optReply(opt, repErrUnsup, nil)
	}
}

// info answers NBD_OPT_INFO and NBD_OPT_GO, whose data is the export name's
// length and the name, then the number of info requests and the requests,
// 16 bits each.
func (cn *conn) info(opt uint32, data []byte) (bool, error) {
	if len(data) < 6 {
		return false, cn.optReply(opt, repErrInvalid, nil)
	}
	nameLen := binary.BigEndian.Uint32(data)
	if nameLen > uint32(len(data)-6) {
		return false, cn.optReply(opt, repErrInvalid, nil)
	}
	name, rest := data[4:4+nameLen], data[4+nameLen:]
	nreq := int(binary.BigEndian.Uint16(rest))
	if len(rest) != 2+2*nreq {
		return false, cn.optReply(opt, repErrInvalid, nil)
	}
	if !cn.s.exports(string(name)) {
		return false, cn.optReply(opt, repErrUnknown, nil)
	}
	wantName := false
	for i := range nreq {
		// NBD_INFO_BLOCK_SIZE is sent whether asked for or not; other
		// requests (NBD_INFO_DESCRIPTION) are ignored, as the spec allows.
		wantName = wantName || binary.BigEndian.Uint16(rest[2+2*i:]) == infoName
	}

	export := binary.BigEndian.AppendUint16(nil, infoExport)
	export = binary.BigEndian.AppendUint64(export, uint64(cn.s.dev.Size()))
	export = binary.BigEndian.AppendUint16(export, transmissionFlags)
	if err := cn.optReply(opt, repInfo, export); err != nil {
		return false, err
	}
	if wantName {
		canonical := binary.BigEndian.AppendUint16(nil, infoName)
		if err := cn.optReply(opt, repInfo, append(canonical, cn.s.opts.ExportName...)); err != nil {
			return false, err
		}
	}
	sizes := binary.BigEndian.AppendUint16(nil, infoBlockSize)
	sizes = binary.BigEndian.AppendUint32(sizes, minBlock)
	sizes = binary.BigEndian.AppendUint32(sizes, preferredBlock)
	sizes = binary.BigEndian.AppendUint32(sizes, maxPayload)
	if err := cn.optReply(opt, repInfo, sizes); err != nil {
		return false, err
	}
	if err := cn.optReply(opt, repAck, nil); err != nil {
		return false, err
	}
	return opt == optGo, nil
}

// optReply sends one reply to opt during option haggling.
func (cn *conn) optReply(opt, typ uint32, data []byte) error {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 20+len(data)), magicOptReply)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	_, err := cn.c.Write(append(b, data...))
	return err
}

// exports reports whether name names the export.
func (s *Server) exports(name string) bool {
	return name == "" || name == s.opts.ExportName
}
