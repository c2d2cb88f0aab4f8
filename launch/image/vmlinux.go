package image

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// The image's kernel is the uncompressed ELF vmlinux taken out of Debian's
// bzImage, which qemu boots through its PVH entry point (Linux's
// CONFIG_PVH, which Debian's kernels have). A bzImage carries vmlinux
// compressed with XZ and a decompressor that runs first at every boot;
// under TCG that decompressor is emulated instruction by instruction, and
// a node's boot took about 3 s longer for it (TestNetworkNamespacesInVM:
// 27.4-31.1 s from the bzImage, 24.0-24.8 s from vmlinux; docs/benchmarks.md).
// Decompressing once, here, costs a second on the host.
//
// The payload is an XZ stream of one block whose filters are x86 BCJ and
// LZMA2 (the kernel's build compresses with xz --x86 --check=crc32). The
// LZMA2 data is decoded by github.com/ulikunitz/xz/lzma, which reads
// LZMA2 but not XZ's BCJ filter; the few container fields around it and
// the filter are read here, and the result is checked against the
// stream's own CRC before it is used.

// vmlinuxFromBzImage returns the ELF kernel inside a bzImage, checked
// against its XZ stream's check and for a PVH entry point.
func vmlinuxFromBzImage(bz []byte) ([]byte, error) {
	off, n, err := bzImagePayload(bz)
	if err != nil {
		return nil, err
	}
	v, err := decodeKernelXZ(bz[off : off+n])
	if err != nil {
		return nil, fmt.Errorf("decompressing the kernel's payload: %w", err)
	}
	if err := checkPVHKernel(v); err != nil {
		return nil, err
	}
	return v, nil
}

// bzImagePayload is where the compressed kernel is in a bzImage, as its
// setup header (Linux's boot protocol, 2.08 or later) says: n bytes at off.
func bzImagePayload(bz []byte) (off, n int, err error) {
	if len(bz) < 0x250 || string(bz[0x202:0x206]) != "HdrS" {
		return 0, 0, errors.New("the kernel is not a bzImage (no HdrS setup header)")
	}
	if v := binary.LittleEndian.Uint16(bz[0x206:]); v < 0x208 {
		return 0, 0, fmt.Errorf("the kernel's boot protocol %d.%02d is older than 2.08, which says where its payload is", v>>8, v&0xff)
	}
	setupSects := int(bz[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	off = (setupSects+1)*512 + int(binary.LittleEndian.Uint32(bz[0x248:]))
	n = int(binary.LittleEndian.Uint32(bz[0x24c:]))
	if off < 0 || n <= 0 || off+n > len(bz) {
		return 0, 0, fmt.Errorf("the kernel's payload (%d bytes at %d) is outside its %d bytes", n, off, len(bz))
	}
	return off, n, nil
}

const (
	xzFilterX86   = 0x04
	xzFilterLZMA2 = 0x21
	xzCheckNone   = 0x00
	xzCheckCRC32  = 0x01
	xzCheckCRC64  = 0x04
)

// decodeKernelXZ decodes an XZ stream of one block, filters LZMA2 and
// optionally x86 BCJ, as the kernel's build writes it. Bytes after the
// stream (the kernel's build appends the decompressed size) are ignored.
func decodeKernelXZ(s []byte) ([]byte, error) {
	if len(s) < 12+12 || !bytes.Equal(s[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}) {
		return nil, errors.New("not an XZ stream (the image builder reads XZ, what Debian's kernels use)")
	}
	check := s[7] & 0x0f
	checkSize := map[byte]int{xzCheckNone: 0, xzCheckCRC32: 4, xzCheckCRC64: 8}
	if _, ok := checkSize[check]; !ok || s[6] != 0 {
		return nil, fmt.Errorf("unsupported XZ stream flags %#x %#x", s[6], s[7])
	}

	// The block header: its size, flags, optional sizes, the filters.
	b := s[12:]
	hdrSize := (int(b[0]) + 1) * 4
	if b[0] == 0 || hdrSize > len(b) {
		return nil, errors.New("bad XZ block header")
	}
	if got, want := crc32.ChecksumIEEE(b[:hdrSize-4]), binary.LittleEndian.Uint32(b[hdrSize-4:]); got != want {
		return nil, errors.New("XZ block header: CRC mismatch")
	}
	hr := bytes.NewReader(b[2 : hdrSize-4])
	flags := b[1]
	if flags&0x40 != 0 {
		if _, err := binary.ReadUvarint(hr); err != nil {
			return nil, fmt.Errorf("XZ block header: %w", err)
		}
	}
	if flags&0x80 != 0 {
		if _, err := binary.ReadUvarint(hr); err != nil {
			return nil, fmt.Errorf("XZ block header: %w", err)
		}
	}
	var x86, haveX86 = uint32(0), false
	dictCap := -1
	for i := 0; i <= int(flags&0x03); i++ {
		id, err1 := binary.ReadUvarint(hr)
		n, err2 := binary.ReadUvarint(hr)
		if err := errors.Join(err1, err2); err != nil || n > 4 {
			return nil, errors.New("XZ block header: bad filter flags")
		}
		props := make([]byte, n)
		if _, err := io.ReadFull(hr, props); err != nil {
			return nil, fmt.Errorf("XZ block header: %w", err)
		}
		switch {
		case id == xzFilterX86 && i == 0:
			haveX86 = true
			if n == 4 {
				x86 = binary.LittleEndian.Uint32(props)
			} else if n != 0 {
				return nil, errors.New("XZ: bad x86 filter properties")
			}
		case id == xzFilterLZMA2 && i == int(flags&0x03) && n == 1:
			p := props[0]
			if p > 40 {
				return nil, fmt.Errorf("XZ: bad LZMA2 dictionary size %d", p)
			}
			dictCap = (2 | int(p&1)) << (p/2 + 11)
			if p == 40 {
				dictCap = 1<<32 - 1
			}
		default:
			return nil, fmt.Errorf("XZ: unsupported filter %#x (want x86 BCJ then LZMA2)", id)
		}
	}
	if dictCap < 0 {
		return nil, errors.New("XZ: the block has no LZMA2 filter")
	}

	// The index, read from the stream's end, gives the block's sizes,
	// hence where its check is.
	unpadded, size, err := xzSingleBlockSizes(s)
	if err != nil {
		return nil, err
	}
	compressed := int(unpadded) - hdrSize - checkSize[check]
	if compressed <= 0 || 12+hdrSize+compressed > len(s) {
		return nil, errors.New("XZ: the index's block size does not fit the stream")
	}
	r, err := lzma.Reader2Config{DictCap: max(dictCap, lzma.MinDictCap)}.NewReader2(bytes.NewReader(b[hdrSize : hdrSize+compressed]))
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, size)
	out, err = readAllInto(out, r)
	if err != nil {
		return nil, fmt.Errorf("LZMA2: %w", err)
	}
	if uint64(len(out)) != size {
		return nil, fmt.Errorf("XZ: decoded %d bytes, the index says %d", len(out), size)
	}
	if haveX86 {
		decodeX86BCJ(out, x86)
	}

	checkAt := 12 + (hdrSize+compressed+3)&^3
	want := s[checkAt : checkAt+checkSize[check]]
	switch check {
	case xzCheckCRC32:
		if binary.LittleEndian.Uint32(want) != crc32.ChecksumIEEE(out) {
			return nil, errors.New("XZ: the decoded kernel does not match the stream's CRC32")
		}
	case xzCheckCRC64:
		if binary.LittleEndian.Uint64(want) != crc64.Checksum(out, crc64.MakeTable(crc64.ECMA)) {
			return nil, errors.New("XZ: the decoded kernel does not match the stream's CRC64")
		}
	}
	return out, nil
}

// readAllInto reads r to its end, appending to buf.
func readAllInto(buf []byte, r io.Reader) ([]byte, error) {
	w := bytes.NewBuffer(buf)
	_, err := io.Copy(w, r)
	return w.Bytes(), err
}

// xzSingleBlockSizes reads an XZ stream's footer and index, which must
// list one block, and returns that block's unpadded and uncompressed
// sizes. The stream may be followed by up to 4 bytes of something else.
func xzSingleBlockSizes(s []byte) (unpadded, size uint64, err error) {
	end := -1
	for _, e := range []int{len(s), len(s) - 4} {
		if e >= 24 && string(s[e-2:e]) == "YZ" {
			end = e
			break
		}
	}
	if end < 0 {
		return 0, 0, errors.New("XZ: no stream footer")
	}
	foot := s[end-12 : end]
	if crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot) {
		return 0, 0, errors.New("XZ: stream footer CRC mismatch")
	}
	indexSize := (int(binary.LittleEndian.Uint32(foot[4:])) + 1) * 4
	if indexSize > end-12-12 {
		return 0, 0, errors.New("XZ: bad index size")
	}
	index := s[end-12-indexSize : end-12]
	if index[0] != 0 || crc32.ChecksumIEEE(index[:indexSize-4]) != binary.LittleEndian.Uint32(index[indexSize-4:]) {
		return 0, 0, errors.New("XZ: bad index")
	}
	ir := bytes.NewReader(index[1 : indexSize-4])
	n, err1 := binary.ReadUvarint(ir)
	unpadded, err2 := binary.ReadUvarint(ir)
	size, err3 := binary.ReadUvarint(ir)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, fmt.Errorf("XZ: reading the index: %w", err)
	}
	if n != 1 {
		return 0, 0, fmt.Errorf("XZ: the stream has %d blocks, the image builder reads one", n)
	}
	return unpadded, size, nil
}

// decodeX86BCJ undoes XZ's x86 branch filter in place. The encoder made
// the 32-bit operands of CALL (E8) and JMP (E9) absolute, so that calls to
// one function compress alike; decoding makes them relative again. The
// filter's rule for which E8/E9 bytes are instructions (it cannot parse
// x86) is a function of the few bytes before each: prevMask records which
// of the last bytes were E8/E9 candidates it skipped, and an operand whose
// top byte is neither 0x00 nor 0xFF is left alone (not a near branch).
// start is the filter's start offset (zero for the kernel).
func decodeX86BCJ(buf []byte, start uint32) {
	allowed := [8]bool{true, true, true, false, true, false, false, false}
	bitNumber := [8]uint32{0, 1, 2, 2, 3, 3, 3, 3}
	isBranchTop := func(b byte) bool { return b == 0 || b == 0xff }

	var prevMask uint32
	prevPos := -5 // as if the last candidate were far before the start
	for i := 0; i+5 <= len(buf); {
		if buf[i] != 0xe8 && buf[i] != 0xe9 {
			i++
			continue
		}
		if d := i - prevPos; d > 5 {
			prevMask = 0
		} else {
			for k := 0; k < d; k++ {
				prevMask = (prevMask & 0x77) << 1
			}
		}
		prevPos = i
		top := buf[i+4]
		if !isBranchTop(top) || !allowed[(prevMask>>1)&7] || prevMask>>1 >= 0x10 {
			prevMask |= 1
			if isBranchTop(top) {
				prevMask |= 0x10
			}
			i++
			continue
		}
		src := binary.LittleEndian.Uint32(buf[i+1:])
		var dest uint32
		for {
			dest = src - (start + uint32(i) + 5)
			if prevMask == 0 {
				break
			}
			shift := bitNumber[prevMask>>1] * 8
			if !isBranchTop(byte(dest >> (24 - shift))) {
				break
			}
			src = dest ^ (1<<(32-shift) - 1)
		}
		// Sign-extend from bit 24: operands span ±16 MiB.
		dest &= 0x01ffffff
		if dest&0x01000000 != 0 {
			dest |= 0xff000000
		}
		binary.LittleEndian.PutUint32(buf[i+1:], dest)
		i += 5
		prevMask = 0
	}
}

// checkPVHKernel checks that v is an x86-64 ELF kernel with a PVH entry
// point (the Xen ELF note XEN_ELFNOTE_PHYS32_ENTRY), which qemu needs to
// boot it directly.
func checkPVHKernel(v []byte) error {
	f, err := elf.NewFile(bytes.NewReader(v))
	if err != nil {
		return fmt.Errorf("the decompressed kernel is not an ELF file: %w", err)
	}
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("the decompressed kernel is for %v, not x86-64", f.Machine)
	}
	const phys32Entry = 18
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return fmt.Errorf("reading the kernel's ELF notes: %w", err)
		}
		for len(notes) >= 12 {
			nameSize := int(binary.LittleEndian.Uint32(notes))
			descSize := int(binary.LittleEndian.Uint32(notes[4:]))
			typ := binary.LittleEndian.Uint32(notes[8:])
			next := 12 + (nameSize+3)&^3 + (descSize+3)&^3
			if next > len(notes) {
				break
			}
			if typ == phys32Entry && string(bytes.TrimRight(notes[12:12+nameSize], "\x00")) == "Xen" {
				return nil
			}
			notes = notes[next:]
		}
	}
	return errors.New("the kernel has no PVH entry point (Linux's CONFIG_PVH), which qemu needs to boot it uncompressed")
}
