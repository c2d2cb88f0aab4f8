package kernelprofile

import "encoding/binary"

// The perf ring's records (perf_event_open(2)): an 8-byte header (type,
// misc, size), then the body. With PERF_SAMPLE_IP alone a sample's body
// is the instruction pointer; a lost record's is an ID and a count.
const (
	recordLost   = 2
	recordSample = 9
	headerSize   = 8
)

// readRing decodes the records in data, a ring buffer whose length is a
// power of two, from offset tail up to head (both running counts, as the
// kernel keeps them), and returns the samples' instruction pointers and
// the count of samples the kernel said it lost. A record may wrap around
// the ring's end. A malformed record (size below a header's, or past
// head) ends the reading: what came before it is kept.
func readRing(data []byte, head, tail uint64) (ips []uint64, lost uint64) {
	size := uint64(len(data))
	if size == 0 {
		return nil, 0
	}
	at := func(off uint64, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = data[(off+uint64(i))%size]
		}
		return b
	}
	for tail+headerSize <= head {
		h := at(tail, headerSize)
		typ := binary.LittleEndian.Uint32(h)
		n := uint64(binary.LittleEndian.Uint16(h[6:]))
		if n < headerSize || tail+n > head {
			break
		}
		switch {
		case typ == recordSample && n >= headerSize+8:
			ips = append(ips, binary.LittleEndian.Uint64(at(tail+headerSize, 8)))
		case typ == recordLost && n >= headerSize+16:
			lost += binary.LittleEndian.Uint64(at(tail+headerSize+8, 8))
		}
		tail += n
	}
	return ips, lost
}
