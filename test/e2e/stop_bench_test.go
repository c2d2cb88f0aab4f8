package e2e

import (
	"io"
	"testing"
	"time"
)

// A cluster of three consensus members stopped all at once, as Ctrl-C on
// polis-launch does (every node gets SIGTERM at the same moment), until
// every process has exited. It used to take about 7 s: the etcd leader
// spent its request timeout handing its leadership to a member that was
// stopping too (see consensus/shutdown.go).
func BenchmarkClusterStop(b *testing.B) {
	var total time.Duration
	for range b.N {
		c := launchCluster(b, 3, true, 0, 0, io.Discard)
		start := time.Now()
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	report(b, total)
}
