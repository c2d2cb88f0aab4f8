// Command netbench measures the network between two Pods, or two nodes,
// for TestVMClusterRunsPods: TCP round trips and throughput, from one end
// to a netbench serving at the other. It prints one JSON line per
// measurement for the test to read, and judges nothing itself.
//
//	netbench serve [ADDR]       serve measurements (ADDR default :5201)
//	netbench rtt ADDR N         N round trips of a 64-byte message on one
//	                            connection: {"kind":"rtt","n":N,
//	                            "min_us":…,"median_us":…,"p90_us":…}
//	netbench tput ADDR SECONDS  send for SECONDS on one connection, the
//	                            bytes counted by the receiver:
//	                            {"kind":"tput","bytes":…,"seconds":…}, and
//	                            the sender's TCP state at the end (Linux):
//	                            "retrans" (segments sent again), "cwnd"
//	                            (segments), "mss", "srtt_us"
//	netbench both ADDR N SECONDS  rtt, then tput: two lines
//	netbench route DST GATEWAY  route address DST through GATEWAY (needs
//	                            CAP_NET_ADMIN; route.go says why)
//	netbench unroute DST        remove that route
//
// A connection starts with one byte saying what it is for: 'e', the server
// echoes every 64-byte message; 's', the server reads until the client
// closes its side, then answers with the count of bytes it read (8 bytes,
// big-endian).
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"time"
)

// msgSize is the round trip's message, about a small request's size.
const msgSize = 64

// chunk is what the throughput test writes at a time.
const chunk = 64 << 10

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch args := os.Args[2:]; os.Args[1] {
	case "serve":
		addr := ":5201"
		if len(args) > 0 {
			addr = args[0]
		}
		err = serve(addr)
	case "rtt":
		if len(args) != 2 {
			usage()
		}
		n, perr := strconv.Atoi(args[1])
		if perr != nil || n < 1 {
			log.Fatalf("netbench rtt: %q is no positive count of round trips", args[1])
		}
		err = rtt(args[0], n)
	case "both":
		if len(args) != 3 {
			usage()
		}
		n, perr := strconv.Atoi(args[1])
		secs, serr := strconv.ParseFloat(args[2], 64)
		if perr != nil || n < 1 || serr != nil || secs <= 0 {
			log.Fatalf("netbench both: want a positive count of round trips and a positive number of seconds, not %q %q", args[1], args[2])
		}
		if err = rtt(args[0], n); err == nil {
			err = tput(args[0], time.Duration(secs*float64(time.Second)))
		}
	case "tput":
		if len(args) != 2 {
			usage()
		}
		secs, perr := strconv.ParseFloat(args[1], 64)
		if perr != nil || secs <= 0 {
			log.Fatalf("netbench tput: %q is no positive number of seconds", args[1])
		}
		err = tput(args[0], time.Duration(secs*float64(time.Second)))
	case "route":
		if len(args) != 2 {
			usage()
		}
		err = routeVia(args[0], args[1])
	case "unroute":
		if len(args) != 1 {
			usage()
		}
		err = unroute(args[0])
	default:
		usage()
	}
	if err != nil {
		log.Fatalf("netbench %s: %v", os.Args[1], err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: netbench serve [ADDR] | netbench rtt ADDR N | netbench tput ADDR SECONDS | netbench both ADDR N SECONDS | netbench route DST GATEWAY | netbench unroute DST")
	os.Exit(2)
}

func serve(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("netbench serving on %s", l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if err := handle(c); err != nil {
				log.Printf("%s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

func handle(c net.Conn) error {
	var kind [1]byte
	if _, err := io.ReadFull(c, kind[:]); err != nil {
		return err
	}
	switch kind[0] {
	case 'e':
		buf := make([]byte, msgSize)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
	case 's':
		n, err := io.Copy(io.Discard, bufio.NewReaderSize(c, chunk))
		if err != nil {
			return err
		}
		var count [8]byte
		binary.BigEndian.PutUint64(count[:], uint64(n))
		_, err = c.Write(count[:])
		return err
	}
	return fmt.Errorf("unknown measurement %q", kind[0])
}

func dial(addr string, kind byte) (*net.TCPConn, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{kind}); err != nil {
		c.Close()
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

func rtt(addr string, n int) error {
	c, err := dial(addr, 'e')
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetNoDelay(true); err != nil {
		return err
	}
	msg, back := make([]byte, msgSize), make([]byte, msgSize)
	times := make([]time.Duration, 0, n)
	// One round trip first, not counted: the connection's first packets
	// (and, over WireGuard, a handshake if none is fresh) are no round
	// trip's cost.
	for i := -1; i < n; i++ {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, back); err != nil {
			return err
		}
		if i >= 0 {
			times = append(times, time.Since(start))
		}
	}
	slices.Sort(times)
	us := func(d time.Duration) int64 { return d.Microseconds() }
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"kind": "rtt", "n": n, "min_us": us(times[0]), "median_us": us(times[n/2]), "p90_us": us(times[n*9/10]),
	})
}

func tput(addr string, d time.Duration) error {
	c, err := dial(addr, 's')
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, chunk)
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	info := senderInfo(c)
	if err := c.CloseWrite(); err != nil {
		return err
	}
	var count [8]byte
	if _, err := io.ReadFull(c, count[:]); err != nil {
		return fmt.Errorf("the receiver's count: %w", err)
	}
	line := map[string]any{"kind": "tput", "bytes": binary.BigEndian.Uint64(count[:]), "seconds": time.Since(start).Seconds()}
	maps.Copy(line, info)
	return json.NewEncoder(os.Stdout).Encode(line)
}
