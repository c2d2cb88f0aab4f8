package consensus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrDatabaseDamaged is returned (wrapped, with the details) when etcd's
// database file is damaged in a way that would crash the whole process if
// etcd opened it: bbolt maps the file into memory and reads pages its
// header says exist, so a file truncated by a power cut or a full disk
// kills the node agent with SIGBUS instead of failing. Run checks the file
// before etcd opens it.
var ErrDatabaseDamaged = errors.New("etcd's database file is damaged")

// dbFile is where etcd keeps its bbolt database under its data directory.
func (l layout) dbFile() string { return filepath.Join(l.etcdDir(), "member", "snap", "db") }

// The check reads the database with bbolt itself, not with a parser of
// bbolt's format of our own, so that it judges the file exactly as the
// bbolt etcd links does, whatever version that is. It runs in a child
// process: this binary again (see init), told by dbCheckEnv what to check.
//
// Why a child: bbolt reads the file through a memory mapping, so a page it
// follows past the end of the file (a truncated file, or a corrupt page
// pointer) is a SIGBUS or SIGSEGV, which Go cannot turn into an error here.
// debug.SetPanicOnFault would, but only on the goroutine that sets it, and
// bbolt's Tx.Check walks the pages on a goroutine of its own. Comparing the
// file's size with the size bbolt's meta gives (Tx.Size) catches a
// truncation without a fault, since opening read-only touches only the two
// meta pages, which bbolt reads with ReadAt first; but a corrupt pointer in
// a page would still fault the checking process. In a child, any fault
// kills the child only, and it is reported as ErrDatabaseDamaged.
const dbCheckEnv = "POLIS_CONSENSUS_CHECK_DATABASE"

// Exit codes of the checking child.
const (
	dbCheckDamaged = 3 // bbolt refused the file; the reason is on stdout
	dbCheckFailed  = 4 // the file could not be checked (not damage)
)

// init is the checking child: a process started by checkDatabase, from any
// binary that links this package (the node agent, a test binary), runs the
// check and exits before main.
func init() {
	if path, ok := os.LookupEnv(dbCheckEnv); ok {
		os.Exit(checkDatabaseHere(path, os.Stdout))
	}
}

// checkDatabaseHere checks the bbolt file at path in this process and
// returns the child's exit code, the reason written to out. It may fault:
// only a child runs it.
func checkDatabaseHere(path string, out io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprint(out, err)
		return dbCheckFailed
	}
	st, err := f.Stat()
	f.Close()
	if err != nil {
		fmt.Fprint(out, err)
		return dbCheckFailed
	}
	// Read-only: nothing is written, not even a new file's meta pages. The
	// timeout is for a lock held by another process (etcd is not running
	// here yet, but an operator's tool may be).
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			fmt.Fprintf(out, "another process holds its lock")
			return dbCheckFailed
		}
		fmt.Fprintf(out, "bbolt cannot open it: %v", err)
		return dbCheckDamaged
	}
	defer db.Close()
	tx, err := db.Begin(false)
	if err != nil {
		fmt.Fprintf(out, "bbolt cannot read it: %v", err)
		return dbCheckDamaged
	}
	defer tx.Rollback()
	// bbolt preallocates, so a file may be longer than its data, never
	// shorter: the pages up to the high-water mark must all be in it.
	if need := tx.Size(); need > st.Size() {
		fmt.Fprintf(out, "%d bytes where bbolt's header says its pages take %d: truncated", st.Size(), need)
		return dbCheckDamaged
	}
	var problems []string
	for err := range tx.Check() {
		if len(problems) < 5 {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(out, "bbolt's check finds: %s", strings.Join(problems, "; "))
		return dbCheckDamaged
	}
	return 0
}

// checkDatabase refuses a bbolt file that bbolt itself finds damaged,
// checking it in a child process (see dbCheckEnv). A missing file is fine:
// etcd creates it. It checks the structure of the pages, not what etcd
// stored in them; etcd's own corruption checks (enabled in etcdConfig)
// compare the content with the other members.
func checkDatabase(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("checking etcd's database: %w", err)
	}
	return checkBolt(ctx, path, func(problem string) error {
		return fmt.Errorf("%w: %s: %s; the node must not run consensus from it: if the cluster has other members, take ConsensusMember from this node (polisctl node remove-role), remove %s and give the role back, so that it copies the data from them; otherwise restore the directory from a backup",
			ErrDatabaseDamaged, path, problem, filepath.Dir(filepath.Dir(filepath.Dir(path))))
	})
}

// CheckSnapshotDatabase checks an etcd database file that is not a
// member's (a snapshot's, decrypted from a backup) the way Run checks its
// own before etcd opens it: with bbolt, in a child process, so that a
// damaged or crafted file fails with ErrDatabaseDamaged instead of
// crashing the caller when it reads the file in-process afterwards. The
// calling program must link this package (its init runs the check).
func CheckSnapshotDatabase(ctx context.Context, path string) error {
	return checkBolt(ctx, path, func(problem string) error {
		return fmt.Errorf("%w: %s", ErrDatabaseDamaged, problem)
	})
}

// checkBolt runs the check of path in a child; damaged makes the error for
// a file bbolt refuses or crashes on.
func checkBolt(ctx context.Context, path string, damaged func(problem string) error) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("checking etcd's database: finding this program to run the check: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), dbCheckEnv+"="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("checking etcd's database: %w", ctx.Err())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return fmt.Errorf("checking etcd's database: running the check: %w", err)
	}
	switch {
	case exit.ExitCode() == dbCheckDamaged:
		return damaged(stdout.String())
	case crashed(stderr.String()):
		// bbolt followed a page past the end of the file or mapping, or
		// one of its assertions on a page failed: what would have killed
		// the agent.
		return damaged("reading it crashes bbolt (" + firstLine(stderr.String()) + ")")
	default:
		return fmt.Errorf("checking etcd's database %s: the check failed: %v: %s%s", path, err, stdout.String(), firstLine(stderr.String()))
	}
}

// crashed reports whether the child's crash output (Go prints it, then
// exits with status 2) is that of a memory fault or of a panic: the child
// does nothing but read the file with bbolt, which asserts on what it reads
// (common.Assert panics) from goroutines of its own, where the child cannot
// recover. A child that failed otherwise (out of memory, killed) says
// nothing of the file, and is not reported as damage.
func crashed(stderr string) bool {
	for _, sign := range []string{"SIGBUS", "SIGSEGV", "unexpected fault address", "panic: "} {
		if strings.Contains(stderr, sign) {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
