package nodeapi

import (
	"net/http"
	"net/http/pprof"
)

// handleProfiles serves the Go runtime's profiles under /debug/pprof/ on
// mux, which the metrics server guards as it guards /metrics (the owner
// only, off loopback). Linking net/http/pprof also registers them on
// http.DefaultServeMux; no server of the agent's (or etcd's) serves that
// mux, so these are the only ones reachable.
//
// The command line (pprof.Cmdline) is left out: a profile does not need
// it, and a node's flags are no business of a profile's reader.
func handleProfiles(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
