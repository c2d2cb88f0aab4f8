package kernelprofile

import (
	"encoding/binary"
	"slices"
	"testing"
)

// record is one perf record as the kernel writes it.
func record(typ uint32, body ...uint64) []byte {
	b := make([]byte, headerSize+8*len(body))
	binary.LittleEndian.PutUint32(b, typ)
	binary.LittleEndian.PutUint16(b[6:], uint16(len(b)))
	for i, v := range body {
		binary.LittleEndian.PutUint64(b[headerSize+8*i:], v)
	}
	return b
}

// ring writes records into a ring of size bytes from running offset
// start, as the kernel would, and returns it with the head after them.
func ring(size int, start uint64, records ...[]byte) ([]byte, uint64) {
	data := make([]byte, size)
	off := start
	for _, r := range records {
		for _, c := range r {
			data[off%uint64(size)] = c
			off++
		}
	}
	return data, off
}

func TestReadRing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		start    uint64
		records  [][]byte
		extra    uint64 // head moved past the records: a torn write
		wantIPs  []uint64
		wantLost uint64
	}{
		{name: "empty", size: 64},
		{name: "samples", size: 64, records: [][]byte{record(recordSample, 0xffffffff81000010), record(recordSample, 0x401000)},
			wantIPs: []uint64{0xffffffff81000010, 0x401000}},
		{name: "a lost record between samples", size: 128, records: [][]byte{record(recordSample, 1), record(recordLost, 7, 42), record(recordSample, 2)},
			wantIPs: []uint64{1, 2}, wantLost: 42},
		{name: "records wrapping the ring's end", size: 64, start: 1000, records: [][]byte{record(recordSample, 11), record(recordSample, 12), record(recordSample, 13)},
			wantIPs: []uint64{11, 12, 13}},
		{name: "other record types skipped", size: 128, records: [][]byte{record(3, 1, 2, 3), record(recordSample, 5)},
			wantIPs: []uint64{5}},
		{name: "a record cut off by head", size: 64, records: [][]byte{record(recordSample, 5), record(recordSample, 6)[:12]},
			wantIPs: []uint64{5}},
		{name: "a zero-size record ends the reading", size: 64, records: [][]byte{record(recordSample, 5), make([]byte, 16)},
			wantIPs: []uint64{5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, head := ring(tc.size, tc.start, tc.records...)
			ips, lost := readRing(data, head+tc.extra, tc.start)
			if !slices.Equal(ips, tc.wantIPs) || lost != tc.wantLost {
				t.Errorf("readRing = %#x, lost %d; want %#x, lost %d", ips, lost, tc.wantIPs, tc.wantLost)
			}
		})
	}
}
