package etcd

import (
	"context"
	"strconv"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkPutToGet measures the time from a Put to a watcher holding the
// decoded value, through event/etcd and through a raw clientv3 watch on the
// same member in the same run. The difference is this package's overhead.
func BenchmarkPutToGet(b *testing.B) {
	c := newCluster(b, 1)
	cli := c.client(b, 0)
	ctx := testCtx(b)

	b.Run("event-etcd", func(b *testing.B) {
		w := NewValue(cli, "/bench/event", decodeInt).Watch()
		defer w.Close()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := cli.Put(ctx, "/bench/event", strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
			for {
				d, err := w.Get(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if d == i {
					break
				}
			}
		}
	})

	b.Run("raw-clientv3-watch", func(b *testing.B) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch := cli.Watch(clientv3.WithRequireLeader(wctx), "/bench/raw")
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := cli.Put(ctx, "/bench/raw", strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		wait:
			for wr := range wch {
				if err := wr.Err(); err != nil {
					b.Fatal(err)
				}
				for _, ev := range wr.Events {
					d, err := strconv.Atoi(string(ev.Kv.Value))
					if err != nil {
						b.Fatal(err)
					}
					if d == i {
						break wait
					}
				}
			}
		}
	})
}
