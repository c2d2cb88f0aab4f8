package consensus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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

// bbolt's on-disk format (go.etcd.io/bbolt, format version 2): the file's
// first two pages are meta pages, each a 16-byte page header followed by
//
//	magic u32, version u32, pageSize u32, flags u32, root bucket (pgid u64,
//	sequence u64), freelist pgid u64, pgid (high-water mark) u64, txid u64,
//	checksum u64 (FNV-64a of the fields before it)
//
// in the machine's byte order (little-endian everywhere Polis runs).
const (
	boltMagic         = 0xED0CDAED
	boltVersion       = 2
	boltPageHeader    = 16
	boltMetaSize      = 64
	boltChecksumStart = 56
	boltNoFreelist    = ^uint64(0)
)

// boltMeta is the part of a meta page the check needs.
type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// parseBoltMeta reads the meta at the start of page, nil if it is not a
// valid one (wrong magic, version or checksum).
func parseBoltMeta(page []byte) *boltMeta {
	if len(page) < boltPageHeader+boltMetaSize {
		return nil
	}
	m := page[boltPageHeader : boltPageHeader+boltMetaSize]
	le := binary.LittleEndian
	if le.Uint32(m[0:]) != boltMagic || le.Uint32(m[4:]) != boltVersion {
		return nil
	}
	h := fnv.New64a()
	h.Write(m[:boltChecksumStart])
	if h.Sum64() != le.Uint64(m[boltChecksumStart:]) {
		return nil
	}
	return &boltMeta{
		pageSize: le.Uint32(m[8:]),
		root:     le.Uint64(m[16:]),
		freelist: le.Uint64(m[32:]),
		pgid:     le.Uint64(m[40:]),
		txid:     le.Uint64(m[48:]),
	}
}

// checkDatabase refuses a bbolt file whose header is damaged or whose
// pages reach past its end, which is what makes bbolt fault rather than
// fail. A missing file is fine: etcd creates it. It does not read the
// pages themselves; etcd's own corruption checks (enabled in etcdConfig)
// compare the content with the other members.
func checkDatabase(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking etcd's database: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checking etcd's database: %w", err)
	}
	size := st.Size()
	damaged := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s; the node must not run consensus from it: if the cluster has other members, take ConsensusMember from this node (polisctl node remove-role), remove %s and give the role back, so that it copies the data from them; otherwise restore the directory from a backup",
			ErrDatabaseDamaged, path, fmt.Sprintf(format, args...), filepath.Dir(filepath.Dir(filepath.Dir(path))))
	}
	// The first meta page sits at 0, the second one page size later; the
	// page size is in the meta itself, so read the first page at the
	// largest size bbolt uses and look for the second where the first says.
	head := make([]byte, 64<<10)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("checking etcd's database: %w", err)
	}
	head = head[:n]
	var metas []*boltMeta
	if m := parseBoltMeta(head); m != nil {
		metas = append(metas, m)
	}
	for _, ps := range []int64{4096, 8192, 16384, 32768, 65536} {
		if len(metas) > 0 && int64(metas[0].pageSize) != ps {
			continue
		}
		page := make([]byte, boltPageHeader+boltMetaSize)
		if _, err := f.ReadAt(page, ps); err != nil {
			continue
		}
		if m := parseBoltMeta(page); m != nil && int64(m.pageSize) == ps {
			metas = append(metas, m)
			break
		}
	}
	if len(metas) == 0 {
		return damaged("neither of its two meta pages is valid (%d bytes in all)", size)
	}
	// bbolt uses the newest valid meta.
	m := metas[0]
	for _, o := range metas[1:] {
		if o.txid > m.txid {
			m = o
		}
	}
	if m.pageSize < 512 || m.pageSize&(m.pageSize-1) != 0 {
		return damaged("page size %d", m.pageSize)
	}
	if m.pgid < 2 || m.root >= m.pgid || (m.freelist != boltNoFreelist && m.freelist >= m.pgid) {
		return damaged("its header names pages beyond its end (root %d, freelist %d, %d pages)", m.root, m.freelist, m.pgid)
	}
	if need := int64(m.pgid) * int64(m.pageSize); m.pgid > uint64(size) || need > size {
		return damaged("%d bytes where its header says %d pages of %d bytes: truncated", size, m.pgid, m.pageSize)
	}
	return nil
}
