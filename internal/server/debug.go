package server

import (
	"net/http"
	"os"
	goruntime "runtime"

	"warren/api"
)

// debugVars answers GET /v1/debug/vars (admin): the daemon's goroutines,
// descriptors and heap, after two garbage collections so that the heap
// figures are what is live: the first moves what sync.Pools cache into their
// victim caches, which stay live until the second.
func (s *Server) debugVars(w http.ResponseWriter, r *http.Request) error {
	goruntime.GC()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.DebugVars{
		Goroutines: goruntime.NumGoroutine(), OpenFDs: len(fds) - 1, // less the one ReadDir used
		HeapAllocBytes: ms.HeapAlloc, HeapObjects: ms.HeapObjects, SysBytes: ms.Sys, NumGC: ms.NumGC,
	})
}
