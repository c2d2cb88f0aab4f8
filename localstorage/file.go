package localstorage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/polis-os/polis/internal/atomicfile"
	"github.com/polis-os/polis/internal/failpoint"
)

// File is one file of the layout.
type File struct {
	// Path is the file's absolute path.
	Path string
	// Secret files are written with mode 0600 and must live in a 0700
	// directory; others with 0644.
	Secret bool
	// Plain files are written and read as they are, without the checksum
	// header: for files another program reads (etcd reads its TLS files
	// and CRL) or an operator hands to one (node parameters for qemu's
	// fw_cfg). Their content must carry its own check (a signature, a
	// fingerprint recorded elsewhere).
	Plain bool
	// Advice says what an operator should do when the file is corrupt; it
	// ends every CorruptError about the file. Empty means the generic
	// advice (restore the file from a backup, or remove it and let its
	// writer make it again).
	Advice string
}

// ErrCorrupt matches (with errors.Is) every CorruptError.
var ErrCorrupt = errors.New("corrupt file")

// CorruptError is the error of Read on a file whose content is not what
// Write wrote: truncated, extended, a bit flipped, or never written by
// Write at all.
type CorruptError struct {
	// Path is the file's path.
	Path string
	// Problem says what is wrong with it.
	Problem string
	// Advice says what to do (see File.Advice).
	Advice string
}

func (e *CorruptError) Error() string {
	advice := e.Advice
	if advice == "" {
		advice = "restore it from a backup, or remove it so that it is made again"
	}
	return fmt.Sprintf("%s is corrupt (%s): %s", e.Path, e.Problem, advice)
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// The checksum header: one text line, so that a person who looks at a file
// sees what it is, then the content exactly as given to Write.
//
//	polis-file v1 sha256=<64 hex digits> size=<decimal>\n<content>
//
// The size tells a truncated or extended file apart from a damaged one in
// the error; the SHA-256 catches every other change. It detects damage, not
// an attacker who can write the file (who could rewrite the sum too):
// secrets are protected by their mode, and the sealed configuration by its
// Sealer.
const headerPrefix = "polis-file v1 sha256="

// maxHeader bounds the header line, so that a garbage file is refused
// without scanning it for a newline.
const maxHeader = len(headerPrefix) + 64 + len(" size=") + 20 + 1

func (f File) mode() os.FileMode {
	if f.Secret {
		return 0o600
	}
	return 0o644
}

// Encode returns content as Write stores it: behind the checksum header,
// or as it is for a Plain file.
func (f File) Encode(content []byte) []byte {
	if f.Plain {
		return content
	}
	return append([]byte(header(content)), content...)
}

// header is the checksum header line of content, newline included.
func header(content []byte) string {
	sum := sha256.Sum256(content)
	return headerPrefix + hex.EncodeToString(sum[:]) + " size=" + strconv.Itoa(len(content)) + "\n"
}

// Decode checks data as Read finds it on disk and returns the content Write
// was given. A Plain file's data is its content.
func (f File) Decode(data []byte) ([]byte, error) {
	if f.Plain {
		return data, nil
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: f.Path, Problem: fmt.Sprintf(format, args...), Advice: f.Advice}
	}
	if len(data) == 0 {
		return nil, corrupt("empty: truncated")
	}
	// Data that does not even start like a header is reported apart from
	// a damaged header, since it may be a file from before headers.
	if !bytes.HasPrefix(data, []byte(headerPrefix)[:min(len(data), len(headerPrefix))]) {
		return nil, corrupt("no checksum header: damaged, or written by a development build from before checksums, which this one does not read (see the package doc)")
	}
	end := bytes.IndexByte(data[:min(len(data), maxHeader)], '\n')
	if end < 0 {
		return nil, corrupt("no complete checksum header: truncated or damaged")
	}
	line, content := data[:end], data[end+1:]
	rest, ok := bytes.CutPrefix(line, []byte(headerPrefix))
	if !ok {
		return nil, corrupt("malformed checksum header")
	}
	sumHex, sizeText, ok := bytes.Cut(rest, []byte(" size="))
	if !ok || len(sumHex) != 2*sha256.Size {
		return nil, corrupt("malformed checksum header")
	}
	want, err := hex.DecodeString(string(sumHex))
	if err != nil {
		return nil, corrupt("malformed checksum header")
	}
	size, err := strconv.Atoi(string(sizeText))
	if err != nil || size < 0 {
		return nil, corrupt("malformed checksum header")
	}
	if size != len(content) {
		return nil, corrupt("%d bytes of content where %d were written: truncated or extended", len(content), size)
	}
	if got := sha256.Sum256(content); !bytes.Equal(got[:], want) {
		return nil, corrupt("checksum mismatch: the content changed after it was written")
	}
	// Only the header Write writes: upper-case digits or a size of "+0"
	// match too, but were not written by Write.
	if string(data[:end+1]) != header(content) {
		return nil, corrupt("malformed checksum header")
	}
	return content, nil
}

// Read returns the file's content, checked against its checksum. A missing
// file is an error that matches fs.ErrNotExist; a damaged one a
// CorruptError (errors.Is(err, ErrCorrupt)).
func (f File) Read() ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Path, err)
	}
	return f.Decode(b)
}

// Exists reports whether the file exists.
func (f File) Exists() (bool, error) {
	_, err := os.Stat(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", f.Path, err)
	}
	return true, nil
}

// Write replaces the file's content atomically, behind its checksum:
// readers and a crash see the old content or the new one, never a mix. The
// directory must exist (see Root.Create).
//
// The failpoint "<path>: write" is passed after the new content is synced
// to a temporary file and before it replaces the old one: a crash there
// leaves the old content (and a temporary file, which Root.Create removes).
func (f File) Write(content []byte) error {
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+tmpInfix+"*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(f.mode()); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if _, err := tmp.Write(f.Encode(content)); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: syncing: %w", f.Path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if err := failpoint.Inject(f.Path + ": write"); err != nil {
		done = true // a crash leaves the temporary file behind
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	done = true
	return atomicfile.SyncDir(dir)
}

// tmpInfix marks Write's temporary files: "." + base name + tmpInfix +
// random digits.
const tmpInfix = ".tmp-"

// Remove deletes the file; a missing file is not an error.
func (f File) Remove() error {
	if err := failpoint.Inject(f.Path + ": remove"); err != nil {
		return fmt.Errorf("removing %s: %w", f.Path, err)
	}
	if err := os.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", f.Path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(f.Path))
}

// ReadProto reads the file into m. A file that does not parse is a
// CorruptError naming the file.
func (f File) ReadProto(m proto.Message) error {
	b, err := f.Read()
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return &CorruptError{Path: f.Path, Problem: fmt.Sprintf("not a %s: %v", m.ProtoReflect().Descriptor().FullName(), err), Advice: f.Advice}
	}
	return nil
}

// WriteProto writes m to the file atomically.
func (f File) WriteProto(m proto.Message) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", f.Path, err)
	}
	return f.Write(b)
}
