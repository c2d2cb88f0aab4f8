package vm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Capture writes every frame that crosses a Switch to a file in the
// classic pcap format (Ethernet link type), which tcpdump, tshark and
// Wireshark read: an operator's view of the cluster wire, and how a test
// checks what crosses it in clear (a marker Pods send each other must not,
// since pod traffic between nodes goes over WireGuard).
//
// Frames are copied by the switch's tap into a queue and written by one
// goroutine, which flushes whenever the queue runs dry, so the file is
// current within moments while the cluster runs.
type Capture struct {
	f     *os.File
	untap func()
	queue chan captured
	done  chan error
	once  sync.Once
	err   error

	// mu guards closed against the tap: a frame may reach the tap after
	// untap returns, and must not be sent on a closed queue.
	mu     sync.RWMutex
	closed bool
}

type captured struct {
	at    time.Time
	frame []byte
}

// captureQueue is how many frames wait for the writer; a full queue holds
// up the port that sends, rather than leaving a frame out of the capture.
const captureQueue = 4096

// StartCapture creates path (0600: it holds whatever the machines send in
// clear) and records every frame of sw into it until Close.
func StartCapture(sw *Switch, path string) (*Capture, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	c := &Capture{f: f, queue: make(chan captured, captureQueue), done: make(chan error, 1)}
	w := bufio.NewWriterSize(f, 1<<16)
	// The pcap file header: magic (microsecond timestamps), version 2.4,
	// GMT, no accuracy claim, the longest frame, LINKTYPE_ETHERNET.
	var hdr [24]byte
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], maxFrame)
	binary.LittleEndian.PutUint32(hdr[20:], 1)
	if _, err := w.Write(hdr[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("capture: %w", err)
	}
	go func() { c.done <- c.write(w) }()
	c.untap = sw.Tap(func(frame []byte) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if !c.closed {
			c.queue <- captured{time.Now(), frame}
		}
	})
	return c, nil
}

func (c *Capture) write(w *bufio.Writer) error {
	var rec [16]byte
	for {
		fr, ok := <-c.queue
		if !ok {
			return w.Flush()
		}
		us := fr.at.UnixMicro()
		binary.LittleEndian.PutUint32(rec[0:], uint32(us/1e6))
		binary.LittleEndian.PutUint32(rec[4:], uint32(us%1e6))
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(fr.frame)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(fr.frame)))
		if _, err := w.Write(rec[:]); err != nil {
			return err
		}
		if _, err := w.Write(fr.frame); err != nil {
			return err
		}
		if len(c.queue) == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// Close stops recording and closes the file, every frame seen until then
// written.
func (c *Capture) Close() error {
	c.once.Do(func() {
		c.untap()
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.queue)
		err := <-c.done
		c.err = errors.Join(err, c.f.Close())
		if c.err != nil {
			c.err = fmt.Errorf("capture: %w", c.err)
		}
	})
	return c.err
}
