package export

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Frames come back as written; one larger than MaxFrame comes back in pieces that
// concatenate to it; after End, io.EOF.
func TestFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	big := bytes.Repeat([]byte("0123456789"), MaxFrame/10+7)
	for _, f := range []struct {
		k Kind
		d []byte
	}{{Header, []byte("h")}, {Queues, big}, {Bodies, nil}, {End, []byte{1, 2}}} {
		if err := w.Frame(f.k, f.d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if w.Written() != int64(buf.Len()) {
		t.Fatalf("Written %d, %d bytes in the buffer", w.Written(), buf.Len())
	}
	r := NewReader(bytes.NewReader(buf.Bytes()))
	var kinds []Kind
	var queues []byte
	for {
		k, d, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, k)
		if k == Queues {
			if len(d) > MaxFrame {
				t.Fatalf("a frame of %d bytes", len(d))
			}
			queues = append(queues, d...)
		}
	}
	if want := []Kind{Header, Queues, Queues, Bodies, End}; !equalKinds(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	if !bytes.Equal(queues, big) {
		t.Fatal("the split frame does not concatenate back")
	}
	if r.Read() != int64(buf.Len()) {
		t.Fatalf("Read %d of %d", r.Read(), buf.Len())
	}
}

func equalKinds(a, b []Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A newer format is refused as newer, a wrong magic or an impossible length as corrupt,
// before anything is allocated for it.
func TestReaderRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		in   []byte
		want error
	}{
		"newer":    {append([]byte(magic), Version+1), ErrNewer},
		"magic":    {[]byte("OKEY\x01"), ErrCorrupt},
		"empty":    {nil, ErrCorrupt},
		"huge":     {append([]byte(magic), Version, byte(Bodies), 0xff, 0xff, 0xff, 0xff, 0x7f), ErrCorrupt},
		"no end":   {append([]byte(magic), Version), ErrCorrupt},
		"bad crc":  {append([]byte(magic), Version, byte(End), 0, 1, 2, 3, 4), ErrCorrupt},
		"cut body": {append([]byte(magic), Version, byte(End), 9, 1), ErrCorrupt},
	} {
		_, _, err := NewReader(bytes.NewReader(c.in)).Next()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// FuzzReader: no input makes the reader panic or hand back a frame past MaxFrame.
func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	_ = w.Frame(Header, []byte("header"))
	_ = w.Frame(End, nil)
	_ = w.Flush()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		for range 100 {
			_, d, err := r.Next()
			if err != nil {
				return
			}
			if len(d) > MaxFrame {
				t.Fatalf("a frame of %d bytes", len(d))
			}
		}
	})
}
