package pid1

import (
	"bytes"
	"encoding/binary"

	"github.com/diskfs/go-diskfs/backend"
)

// lazyJournal is the storage go-diskfs' ext4 formatter writes to, which
// skips its zeroing of the journal, as mke2fs -E lazy_journal_init does.
// The formatter writes the journal's superblock (the jbd2 magic, its
// block size and length) and then zeroes the rest of the journal: 64 MiB
// on the launcher's 2 GiB data disk, most of a first boot's format under
// TCG, since every byte goes through the cipher (docs/benchmarks.md).
//
// Why the zeros are not needed: a new journal's superblock says it is
// empty (s_start 0), so mounting replays nothing, and the kernel then
// writes its transactions from the journal's start, each block tagged
// with the jbd2 magic and the transaction's sequence number. Only a
// replay after a crash reads past the last committed transaction, and it
// stops at the first block that is not the next sequence's descriptor.
// The old contents here are what the disk held: through dm-crypt, a blank
// disk's zeros decrypt to noise, which matches a magic and a sequence
// number with a chance of 2^-64 per block; mke2fs takes the same risk
// with whatever an earlier file system left.
//
// Every other write goes through, zeros included: inode tables and
// bitmaps must read as zeros, and through dm-crypt the disk's own do not.
type lazyJournal struct {
	backend.Storage
	// start and end are the journal's bytes after its superblock, once
	// the formatter wrote the superblock; skipped counts the zeros not
	// written.
	start, end int64
	skipped    int64
}

// jbd2's superblock: the magic at 0, the block type at 4 (3 and 4 are the
// superblock's two versions), the block size at 12, the length in blocks
// at 16; big-endian.
const (
	jbd2Magic           = 0xC03B3998
	jbd2SuperblockSize  = 1024
	jbd2SuperblockV1    = 3
	jbd2SuperblockV2    = 4
	jbd2MaxJournalBytes = 1 << 30
)

func (l *lazyJournal) Writable() (backend.WritableFile, error) {
	w, err := l.Storage.Writable()
	if err != nil {
		return nil, err
	}
	return &lazyJournalFile{WritableFile: w, l: l}, nil
}

type lazyJournalFile struct {
	backend.WritableFile
	l *lazyJournal
}

func (f *lazyJournalFile) WriteAt(p []byte, off int64) (int, error) {
	l := f.l
	if start, end, ok := journalSuperblock(p, off); ok {
		l.start, l.end = start, end
	} else if l.end > 0 && off >= l.start && off+int64(len(p)) <= l.end && allZero(p) {
		l.skipped += int64(len(p))
		return len(p), nil
	}
	return f.WritableFile.WriteAt(p, off)
}

// journalSuperblock says whether p, written at off, is a jbd2 superblock,
// and if so where the rest of its journal lies.
func journalSuperblock(p []byte, off int64) (start, end int64, ok bool) {
	if len(p) != jbd2SuperblockSize || binary.BigEndian.Uint32(p) != jbd2Magic {
		return 0, 0, false
	}
	if t := binary.BigEndian.Uint32(p[4:]); t != jbd2SuperblockV1 && t != jbd2SuperblockV2 {
		return 0, 0, false
	}
	size := int64(binary.BigEndian.Uint32(p[12:])) * int64(binary.BigEndian.Uint32(p[16:]))
	if size <= jbd2SuperblockSize || size > jbd2MaxJournalBytes {
		return 0, 0, false
	}
	return off + jbd2SuperblockSize, off + size, true
}

var zeros [64 << 10]byte

func allZero(p []byte) bool {
	for len(p) > 0 {
		n := min(len(p), len(zeros))
		if !bytes.Equal(p[:n], zeros[:n]) {
			return false
		}
		p = p[n:]
	}
	return true
}
