package pid1

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/filesystem/ext4"
)

// TestLazyJournal formats a disk that holds no zeros (as a blank disk
// reads through dm-crypt) with the journal left unzeroed: the journal
// keeps the disk's old bytes after its superblock, everything else the
// formatter wrote is written, and e2fsck finds the file system clean.
func TestLazyJournal(t *testing.T) {
	const size = 256 << 20
	p := filepath.Join(t.TempDir(), "data.img")
	fill := bytes.Repeat([]byte{0xA5}, 1<<20)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for range size / len(fill) {
		if _, err := f.Write(fill); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := diskfs.Open(p, diskfs.WithOpenMode(diskfs.ReadWriteExclusive))
	if err != nil {
		t.Fatal(err)
	}
	lj := &lazyJournal{Storage: d.Backend}
	_, err = ext4.Create(lj, d.Size, 0, d.LogicalBlocksize, &ext4.Params{VolumeName: "polis-data", InodeRatio: dataInodeRatio})
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	journal := lj.end - lj.start + jbd2SuperblockSize
	t.Logf("journal of %d KiB at %d; %d KiB of zeros not written", journal>>10, lj.start-jbd2SuperblockSize, lj.skipped>>10)
	if lj.end == 0 || lj.skipped < journal-4096 {
		t.Fatalf("the journal's zeros were written: journal [%d, %d), %d bytes skipped", lj.start, lj.end, lj.skipped)
	}
	img, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sb := img[lj.start-jbd2SuperblockSize:]
	if binary.BigEndian.Uint32(sb) != jbd2Magic || binary.BigEndian.Uint32(sb[28:]) != 0 {
		t.Fatalf("the journal's superblock: magic %#x, s_start %d; want the magic and 0 (empty)", binary.BigEndian.Uint32(sb), binary.BigEndian.Uint32(sb[28:]))
	}
	if !bytes.Equal(img[lj.start+4096:lj.start+8192], fill[:4096]) {
		t.Error("the journal's blocks were overwritten")
	}
	fsck, err := exec.LookPath("e2fsck")
	if err != nil {
		t.Skipf("no e2fsck here to check the file system: %v", err)
	}
	out, err := exec.Command(fsck, "-f", "-n", p).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -f -n: %v\n%s", err, out)
	}
	// go-diskfs' file systems draw "Resize inode not valid" with zeros
	// beneath as well; the journal must draw nothing.
	if bytes.Contains(bytes.ToLower(out), []byte("journal")) {
		t.Errorf("e2fsck -f -n finds fault with the journal:\n%s", out)
	}
	t.Logf("e2fsck -f -n:\n%s", out)
}
