// Package agent is warren's guest agent: the server that runs as PID 1 inside
// every sandbox (a microVM or a container) and serves the sandbox API to the
// node over one HTTP handler: the process and filesystem services
// (Connect-RPC, wire-compatible with E2B's envd), the control service
// (identity, filesystem freeze for snapshots, shutdown), and file contents
// over plain HTTP (GET and PUT /files).
//
// It is transport-independent: Serve takes any net.Listener (in a container,
// the unix socket the runtime hands it; in a microVM, the virtio-serial port
// of package vmport; in tests, a unix or TCP socket). It does not set up the
// sandbox (mounts, network, cgroups): the runtime has done that before it
// starts. It reaps every child, orphans included, and so must be the only
// code in its process that waits for children.
//
// The sandbox's code is hostile: every input is checked, every buffer and
// wait is bounded, and nothing it does through the API can crash or hang the
// agent.
package agent
