package resolver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"
)

// serveUDP reads queries and answers each in a goroutine of its own, as
// long as the source's and the server's in-flight bounds allow; over them a
// query is dropped (the client retries), so that one sandbox's flood of
// slow queries cannot take the slots of the others.
func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, maxQuery+1) // one more, to tell an over-long query
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("dns: udp read", "err", err)
			continue
		}
		if n > maxQuery {
			continue
		}
		src := from.Addr().Unmap()
		if !s.udpSlots.acquire(src) {
			continue
		}
		wire := bytes.Clone(buf[:n])
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.udpSlots.release(src)
			if resp := s.handle(s.ctx, src, wire, false); resp != nil {
				s.udp.WriteToUDPAddrPort(resp, from) // a lost answer is retried by the client
			}
		}()
	}
}

// serveTCP accepts connections, within the per-source and overall bounds,
// and serves each in a goroutine of its own.
func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.AcceptTCP()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("dns: tcp accept", "err", err)
			select { // out of file descriptors, say: let some close
			case <-s.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if !s.tcpSlots.acquire(src) {
			c.Close()
			continue
		}
		if !s.track(c) {
			s.tcpSlots.release(src)
			c.Close()
			return
		}
		s.wg.Add(1)
		go s.serveConn(c, src)
	}
}

// serveConn answers the queries of one TCP connection in turn (RFC 7766
// allows, not requires, answering out of order) until the client closes
// it, is idle for tcpIdle, sends something that is not a query, or floods.
func (s *Server) serveConn(c *net.TCPConn, src netip.Addr) {
	defer s.wg.Done()
	defer s.tcpSlots.release(src)
	defer s.untrack(c)
	buf := make([]byte, 2+maxQuery)
	for {
		// The whole message is due within tcpIdle, so a client trickling
		// bytes holds its connection no longer than an idle one.
		c.SetReadDeadline(time.Now().Add(tcpIdle))
		if _, err := io.ReadFull(c, buf[:2]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(buf))
		if n > maxQuery {
			return
		}
		if _, err := io.ReadFull(c, buf[2:2+n]); err != nil {
			return
		}
		resp := s.handle(s.ctx, src, buf[2:2+n], true)
		if resp == nil {
			return
		}
		out := make([]byte, 2+len(resp))
		binary.BigEndian.PutUint16(out, uint16(len(resp)))
		copy(out[2:], resp)
		c.SetWriteDeadline(time.Now().Add(tcpWrite))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
