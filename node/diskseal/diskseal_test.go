package diskseal

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testHeader is a whole header, bound to its cluster, with its parts.
func testHeader(t testing.TB) (h *Header, key, local, cluster []byte) {
	key, local, cluster = NewDataKey(), NewPart(), NewPart()
	h = &Header{Sealing: SealingTPM, State: StateReady, Generation: 7, SealedLocal: []byte("sealed by the TPM")}
	if err := h.Wrap(key, local, cluster); err != nil {
		t.Fatal(err)
	}
	return h, key, local, cluster
}

func TestHeaderRoundTrip(t *testing.T) {
	bound, _, _, _ := testHeader(t)
	unbound := &Header{Sealing: SealingSoftware, State: StateFormatting, Generation: 1, SealedLocal: bytes.Repeat([]byte{0xAB}, MaxSealedLocal)}
	if err := unbound.Wrap(NewDataKey(), NewPart(), nil); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Header{bound, unbound} {
		b, err := h.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != HeaderSize {
			t.Fatalf("Encode: %d bytes, want %d", len(b), HeaderSize)
		}
		got, err := Decode(append(b, make([]byte, 100)...)) // what follows is not the header's
		if err != nil {
			t.Fatal(err)
		}
		if got.Sealing != h.Sealing || got.State != h.State || got.ClusterBound != h.ClusterBound || got.Generation != h.Generation ||
			got.Salt != h.Salt || !bytes.Equal(got.WrappedKey, h.WrappedKey) || !bytes.Equal(got.SealedLocal, h.SealedLocal) {
			t.Fatalf("Decode(Encode(%+v)) = %+v", h, got)
		}
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	w := make([]byte, WrappedKeySize)
	for name, h := range map[string]*Header{
		"no sealing":      {State: StateReady, Generation: 1, WrappedKey: w, SealedLocal: []byte("x")},
		"no state":        {Sealing: SealingTPM, Generation: 1, WrappedKey: w, SealedLocal: []byte("x")},
		"generation 0":    {Sealing: SealingTPM, State: StateReady, WrappedKey: w, SealedLocal: []byte("x")},
		"no wrapped key":  {Sealing: SealingTPM, State: StateReady, Generation: 1, SealedLocal: []byte("x")},
		"no local part":   {Sealing: SealingTPM, State: StateReady, Generation: 1, WrappedKey: w},
		"too large local": {Sealing: SealingTPM, State: StateReady, Generation: 1, WrappedKey: w, SealedLocal: make([]byte, MaxSealedLocal+1)},
	} {
		if _, err := h.Encode(); err == nil {
			t.Errorf("%s: Encode succeeded", name)
		}
	}
}

func TestDecodeNoHeader(t *testing.T) {
	for name, b := range map[string][]byte{
		"blank": make([]byte, HeaderSize),
		"ext4":  append(make([]byte, 1080), 0x53, 0xEF),
		"short": []byte("POL"),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrNoHeader) {
			t.Errorf("%s: Decode = %v, want ErrNoHeader", name, err)
		}
	}
}

// TestDecodeDamaged flips every bit of the header after the magic in turn:
// each flip is a DamagedError, never another header.
func TestDecodeDamaged(t *testing.T) {
	h, _, _, _ := testHeader(t)
	b, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for i := len(Magic); i < HeaderSize; i++ {
		for bit := range 8 {
			d := bytes.Clone(b)
			d[i] ^= 1 << bit
			_, err := Decode(d)
			var de *DamagedError
			if !errors.As(err, &de) {
				t.Fatalf("byte %d bit %d flipped: Decode = %v, want a DamagedError", i, bit, err)
			}
		}
	}
	if _, err := Decode(b[:HeaderSize-1]); err == nil {
		t.Fatal("a truncated header decoded")
	}
}

func TestDamagedErrorsSayWhy(t *testing.T) {
	h, _, _, _ := testHeader(t)
	for _, c := range []struct {
		change func(b []byte)
		want   string
	}{
		{func(b []byte) { b[offVersion] = 9 }, "version 9"},
		{func(b []byte) { b[offVersion] = 1 }, "version 1, written by a development build"},
		{func(b []byte) { b[offSalt] ^= 1 }, "checksum"},
	} {
		b, _ := h.Encode()
		c.change(b)
		if _, err := Decode(b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode = %v, want an error saying %q", err, c.want)
		}
	}
}

// TestWrap: the data key comes back only with the parts it was wrapped
// under; rewrapping (binding to the cluster, unbinding) keeps the key and
// changes the salt and the wrap.
func TestWrap(t *testing.T) {
	h, key, local, cluster := testHeader(t)
	if !h.ClusterBound {
		t.Fatal("wrapped with a cluster part, the header is not ClusterBound")
	}
	got, err := h.Unwrap(bytes.Clone(local), bytes.Clone(cluster))
	if err != nil || !bytes.Equal(got, key) {
		t.Fatalf("Unwrap with the right parts = %x, %v", got, err)
	}
	for name, parts := range map[string][2][]byte{
		"another local part":   {NewPart(), cluster},
		"another cluster part": {local, NewPart()},
		"the parts swapped":    {cluster, local},
	} {
		if k, err := h.Unwrap(parts[0], parts[1]); !errors.Is(err, ErrWrongKey) {
			t.Errorf("%s: Unwrap = %x, %v; want ErrWrongKey", name, k, err)
		}
	}
	if _, err := h.Unwrap(local, nil); err == nil || errors.Is(err, ErrWrongKey) {
		t.Errorf("a bound header unwrapped without the cluster part: %v (want an error saying the part is needed)", err)
	}
	for name, parts := range map[string][2][]byte{
		"short local":   {local[:31], cluster},
		"long cluster":  {local, append(bytes.Clone(cluster), 0)},
		"empty cluster": {local, {}},
	} {
		if _, err := h.Unwrap(parts[0], parts[1]); err == nil {
			t.Errorf("%s: Unwrap succeeded", name)
		}
	}

	// Unbinding: the local part alone opens it, the same key.
	old := *h
	if err := h.Wrap(key, local, nil); err != nil {
		t.Fatal(err)
	}
	if h.ClusterBound || h.Salt == old.Salt || bytes.Equal(h.WrappedKey, old.WrappedKey) {
		t.Fatalf("unbound: ClusterBound %v, salt or wrap unchanged", h.ClusterBound)
	}
	if got, err := h.Unwrap(local, nil); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("Unwrap of the unbound header = %x, %v", got, err)
	}
	if _, err := h.Unwrap(local, cluster); err == nil {
		t.Fatal("an unbound header took a cluster part")
	}

	// The flags are bound to the wrap: flipping ClusterBound (or the
	// sealing) in a header re-summed by an attacker opens nothing.
	forged := *h
	forged.Sealing = SealingSoftware
	if _, err := forged.Unwrap(local, nil); !errors.Is(err, ErrWrongKey) {
		t.Errorf("with its sealing changed, the wrap opened: %v", err)
	}
	forged = old
	forged.ClusterBound = false
	if _, err := forged.Unwrap(local, nil); !errors.Is(err, ErrWrongKey) {
		t.Errorf("a bound wrap marked unbound opened with the local part alone: %v", err)
	}

	if err := h.Wrap(key[:63], local, nil); err == nil {
		t.Error("a 63-byte data key was wrapped")
	}
}

// area lays headers out in their slots, as on the disk; nil leaves a
// slot blank.
func area(t *testing.T, slots ...[]byte) []byte {
	a := make([]byte, HeaderArea+512)
	for i, s := range slots {
		copy(a[Offset(i):], s)
	}
	return a
}

func encode(t *testing.T, h *Header, gen uint64) []byte {
	t.Helper()
	c := *h
	c.Generation = gen
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRead: the whole slot of the highest generation is the header, in
// either slot; a torn rewrite leaves the older one; two whole slots say
// the older is stale.
func TestRead(t *testing.T) {
	h, _, _, _ := testHeader(t)
	torn := encode(t, h, 9)
	copy(torn[100:], make([]byte, 200))
	for _, c := range []struct {
		name  string
		area  []byte
		slot  int
		gen   uint64
		stale bool
	}{
		{"first header, slot 0", area(t, encode(t, h, 1)), 0, 1, false},
		{"rewritten to slot 1, slot 0 wiped", area(t, nil, encode(t, h, 2)), 1, 2, false},
		{"both whole, slot 1 newer", area(t, encode(t, h, 2), encode(t, h, 3)), 1, 3, true},
		{"both whole, slot 0 newer", area(t, encode(t, h, 4), encode(t, h, 3)), 0, 4, true},
		{"the rewrite to slot 1 torn", area(t, encode(t, h, 8), torn), 0, 8, false},
		{"the rewrite to slot 0 torn", area(t, torn, encode(t, h, 8)), 1, 8, false},
	} {
		f, err := Read(c.area)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if f.Slot != c.slot || f.Header.Generation != c.gen || f.Stale != c.stale || f.Next() != 1-c.slot {
			t.Errorf("%s: slot %d generation %d stale %v; want slot %d generation %d stale %v", c.name, f.Slot, f.Header.Generation, f.Stale, c.slot, c.gen, c.stale)
		}
	}

	if _, err := Read(area(t)); !errors.Is(err, ErrNoHeader) {
		t.Errorf("a blank disk: %v, want ErrNoHeader", err)
	}
	var de *DamagedError
	if _, err := Read(area(t, torn)); !errors.As(err, &de) {
		t.Errorf("only a torn header: %v, want a DamagedError", err)
	}
	if _, err := Read(area(t, torn, torn)); !errors.As(err, &de) {
		t.Errorf("two torn headers: %v, want a DamagedError", err)
	}
	if _, err := Read(area(t, encode(t, h, 5), encode(t, h, 5))); !errors.As(err, &de) {
		t.Errorf("two slots of one generation: %v, want a DamagedError", err)
	}
	if _, err := Read(make([]byte, HeaderArea-1)); err == nil {
		t.Error("a short area was read")
	}
}

func FuzzDecode(f *testing.F) {
	h, _, _, _ := testHeader(f)
	b, _ := h.Encode()
	f.Add(b)
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			return
		}
		again, err := h.Encode()
		if err != nil {
			t.Fatalf("a decoded header does not encode: %v", err)
		}
		if !bytes.Equal(again, b[:HeaderSize]) {
			t.Fatal("a decoded header encodes to other bytes")
		}
	})
}
