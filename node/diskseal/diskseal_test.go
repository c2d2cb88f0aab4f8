package diskseal

import (
	"bytes"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testHeader() *Header {
	return &Header{Sealing: SealingTPM, State: StateReady, ClusterBound: true, Salt: NewSalt(), SealedLocal: []byte("sealed by the TPM")}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []*Header{
		testHeader(),
		{Sealing: SealingSoftware, State: StateFormatting, Salt: NewSalt(), SealedLocal: bytes.Repeat([]byte{0xAB}, MaxSealedLocal)},
	} {
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
		if got.Sealing != h.Sealing || got.State != h.State || got.ClusterBound != h.ClusterBound || got.Salt != h.Salt || !bytes.Equal(got.SealedLocal, h.SealedLocal) {
			t.Fatalf("Decode(Encode(%+v)) = %+v", h, got)
		}
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	for name, h := range map[string]*Header{
		"no sealing":      {State: StateReady, SealedLocal: []byte("x")},
		"no state":        {Sealing: SealingTPM, SealedLocal: []byte("x")},
		"no local part":   {Sealing: SealingTPM, State: StateReady},
		"too large local": {Sealing: SealingTPM, State: StateReady, SealedLocal: make([]byte, MaxSealedLocal+1)},
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
	b, err := testHeader().Encode()
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
	h := testHeader()
	b, _ := h.Encode()
	b[offVersion] = 9
	_, err := Decode(b)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("version 9")) {
		t.Fatalf("a header of version 9: %v", err)
	}
	b, _ = h.Encode()
	b[offSalt] ^= 1
	if _, err := Decode(b); err == nil || !bytes.Contains([]byte(err.Error()), []byte("checksum")) {
		t.Fatalf("a flipped salt bit: %v", err)
	}
}

func TestDataKey(t *testing.T) {
	local, cluster, salt := NewPart(), NewPart(), NewSalt()
	k, err := DataKey(local, cluster, salt)
	if err != nil {
		t.Fatal(err)
	}
	if len(k) != 64 {
		t.Fatalf("a %d-byte key, want 64 (aes-xts-plain64, 512 bits)", len(k))
	}
	again, _ := DataKey(bytes.Clone(local), bytes.Clone(cluster), salt)
	if !bytes.Equal(k, again) {
		t.Fatal("the same parts and salt gave two keys")
	}
	differs := func(name string, other []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if bytes.Equal(k, other) {
			t.Fatalf("%s: the same key", name)
		}
	}
	o, err := DataKey(NewPart(), cluster, salt)
	differs("another local part", o, err)
	o, err = DataKey(local, NewPart(), salt)
	differs("another cluster part", o, err)
	o, err = DataKey(local, cluster, NewSalt())
	differs("another salt", o, err)
	o, err = DataKey(local, nil, salt)
	differs("no cluster part", o, err)
	// Swapping the parts must not give the same key.
	o, err = DataKey(cluster, local, salt)
	differs("parts swapped", o, err)

	for name, parts := range map[string][2][]byte{
		"short local":   {local[:31], cluster},
		"long cluster":  {local, append(bytes.Clone(cluster), 0)},
		"empty cluster": {local, {}},
	} {
		if _, err := DataKey(parts[0], parts[1], salt); err == nil {
			t.Errorf("%s: DataKey succeeded", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := testHeader().Encode()
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
