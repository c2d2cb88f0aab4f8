package vm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// console is a machine's serial console for one boot: every line is
// written to the log with the host's timestamp (the guest's clock says
// nothing about when the host saw it), and kept so that callers can wait
// for a line.
type console struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every new line and at EOF
	closed  bool
}

func newConsole() *console { return &console{changed: make(chan struct{})} }

// copy reads the console from r until EOF, writing each line to log. It
// never stops before EOF: qemu's serial port waits for the launcher to
// read, so a console no longer read would stall the guest. A line longer
// than consoleMaxLine is kept as several.
func (c *console) copy(r io.Reader, log io.Writer) {
	br := bufio.NewReaderSize(r, consoleMaxLine)
	for {
		b, err := br.ReadSlice('\n')
		if len(b) > 0 {
			c.add(log, string(b))
		}
		if err != nil && err != bufio.ErrBufferFull {
			break
		}
	}
	c.mu.Lock()
	c.closed = true
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// logTime is the host's time now, as the console log stamps its lines.
func logTime() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }

// consoleMaxLine is the longest console line kept whole.
const consoleMaxLine = 64 << 10

// add writes one line to log, stamped with the host's time, and keeps it.
func (c *console) add(log io.Writer, raw string) {
	// Firmware draws with terminal escapes; keep only the text.
	line := strings.TrimRight(stripEscapes(strings.TrimSuffix(raw, "\n")), "\r ")
	fmt.Fprintf(log, "%s %s\n", logTime(), line)
	c.mu.Lock()
	c.lines = append(c.lines, line)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// wait returns the first line from index from on that contains substr,
// and the index after it.
func (c *console) wait(ctx context.Context, from int, substr string) (string, int, error) {
	for {
		c.mu.Lock()
		for i := from; i < len(c.lines); i++ {
			if strings.Contains(c.lines[i], substr) {
				l := c.lines[i]
				c.mu.Unlock()
				return l, i + 1, nil
			}
		}
		from = len(c.lines)
		closed, ch := c.closed, c.changed
		c.mu.Unlock()
		if closed {
			return "", from, fmt.Errorf("the machine's console ended without a line containing %q", substr)
		}
		select {
		case <-ctx.Done():
			return "", from, fmt.Errorf("waiting for a console line containing %q: %w", substr, ctx.Err())
		case <-ch:
		}
	}
}

// last returns the last line containing substr.
func (c *console) last(substr string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.lines) - 1; i >= 0; i-- {
		if strings.Contains(c.lines[i], substr) {
			return c.lines[i], true
		}
	}
	return "", false
}

// tail returns the last n lines, for error messages.
func (c *console) tail(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// stripEscapes removes ANSI escape sequences (ESC [ ... letter, ESC c).
func stripEscapes(s string) string {
	if !strings.ContainsRune(s, 0x1b) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1b {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '[' {
			i += 2
			for i < len(s) && (s[i] < '@' || s[i] > '~') {
				i++
			}
			continue
		}
		i++ // a two-byte sequence such as ESC c
	}
	return b.String()
}
