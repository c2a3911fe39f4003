// Package earlyconn is a connection whose first bytes were read ahead (to
// sniff what it carries) and are read again before the rest: the
// exposed-port proxy's and the egress interceptor's.
package earlyconn

import (
	"errors"
	"net"
)

// Conn reads Early, then Conn.
type Conn struct {
	net.Conn
	Early []byte // what is left of the bytes read ahead
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(c.Early) > 0 {
		n := copy(p, c.Early)
		c.Early = c.Early[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite passes a half close on, when the connection has one.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
