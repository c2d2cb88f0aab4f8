package nodeapi

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
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
	mux.Handle("/debug/pprof/", boundedSeconds(pprof.Index)) // heap?seconds=N and the like
	mux.Handle("/debug/pprof/profile", boundedSeconds(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.Handle("/debug/pprof/trace", boundedSeconds(pprof.Trace))
}

// maxProfileSeconds is the longest profile or trace served: a CPU
// profile, a trace, or a delta of the others (heap?seconds=N). The
// runtime takes one CPU profile at a time, so one asked for ten hours by
// a slip of the keyboard would refuse every other until its reader hung
// up; and each holds a connection, and a response open past the server's
// write timeout, for as long as it was asked.
const maxProfileSeconds = 300

// boundedSeconds refuses a ?seconds= that is not a whole number from 1
// to maxProfileSeconds, naming what was wrong; without one, h's default.
func boundedSeconds(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("seconds"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxProfileSeconds {
				http.Error(w, fmt.Sprintf("seconds=%q: want a whole number of seconds from 1 to %d", v, maxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		h(w, r)
	})
}
