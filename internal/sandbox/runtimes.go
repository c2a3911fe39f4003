package sandbox

import (
	"strings"

	"warren/api"
	"warren/internal/runtime"
)

// isolationRank orders runtimes by strength; unknown names rank lowest.
func isolationRank(name string) int {
	switch name {
	case api.IsolationVM:
		return 3
	case api.IsolationGVisor:
		return 2
	case api.IsolationContainer:
		return 1
	}
	return 0
}

// pickRuntime resolves the requested runtime name. "auto" (or "") takes the
// strongest available runtime, but not a vm under TCG (software emulation,
// seconds per boot: for testing, asked for by name) unless the node
// requires vm isolation. A runtime weaker than Config.RequireIsolation is
// refused.
func (m *Manager) pickRuntime(name string) (runtime.Runtime, error) {
	req := m.cfg.RequireIsolation
	if name == "" || name == "auto" {
		var reasons []string
		for _, rt := range m.deps.Runtimes {
			switch err := rt.Available(); {
			case err != nil:
				reasons = append(reasons, rt.Name()+": "+err.Error())
			case isolationRank(rt.Name()) < isolationRank(req):
				reasons = append(reasons, rt.Name()+": weaker than the required isolation "+req)
			case runtime.Accel(rt) == "tcg" && req != api.IsolationVM:
				reasons = append(reasons, rt.Name()+": runs under tcg software emulation, picked only by name")
			default:
				return rt, nil
			}
		}
		if req != "" {
			return nil, api.Errorf(api.CodeConflict, "this node requires %s isolation and no such runtime is available (%s)", req, strings.Join(reasons, "; "))
		}
		return nil, api.Errorf(api.CodeUnavailable, "no runtime available on this node (%s)", strings.Join(reasons, "; "))
	}
	for _, rt := range m.deps.Runtimes {
		if rt.Name() == name {
			if isolationRank(name) < isolationRank(req) {
				return nil, api.Errorf(api.CodeBadRequest, "this node requires %s isolation: runtime %s is weaker", req, name)
			}
			if err := rt.Available(); err != nil {
				return nil, api.Errorf(api.CodeUnavailable, "runtime %s is not available on this node: %v", name, err)
			}
			return rt, nil
		}
	}
	var names []string
	for _, rt := range m.deps.Runtimes {
		names = append(names, rt.Name())
	}
	return nil, api.Errorf(api.CodeBadRequest, "unknown runtime %q (this node has: auto, %s)", name, strings.Join(names, ", "))
}
