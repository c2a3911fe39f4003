package sandbox

import (
	"context"
	"net"

	"warren/api"
)

// DialPort connects to a TCP port a running sandbox of tenant listens on,
// through its router (docs/NETWORK.md). CodeNotFound for an unknown
// sandbox, CodeConflict for one not running or on a node without sandbox
// networking.
func (m *Manager) DialPort(ctx context.Context, tenant, id string, port int) (net.Conn, error) {
	if _, err := m.running(ctx, tenant, id); err != nil {
		return nil, err
	}
	return nil, api.Errorf(api.CodeConflict, "sandbox networking is not enabled on this node")
}
