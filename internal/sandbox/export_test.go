package sandbox

// What the external tests (package sandbox_test, which may import
// sandboxtest) look at inside a Manager.

// DiskPath is where the sandbox's root disk is.
func (m *Manager) DiskPath(id string) string { return m.diskPath(id) }

// StateDir is the sandbox's private directory.
func (m *Manager) StateDir(id string) string { return m.stateDir(id) }

// CountsLive says whether the manager counts the sandbox live.
func (m *Manager) CountsLive(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.live[id]
	return ok
}
