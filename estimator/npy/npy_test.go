package npy

import (
	"bytes"
	"strings"
	"testing"
)

func TestNPYHeaderLayout(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	hlen := int(b[8]) | int(b[9])<<8
	if string(b[:6]) != "\x93NUMPY" || b[6] != 1 || (10+hlen)%64 != 0 || b[10+hlen-1] != '\n' {
		t.Fatalf("bad header % x", b[:16])
	}
	if h := string(b[10 : 10+hlen]); !strings.HasPrefix(h, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") {
		t.Errorf("header %q", h)
	}
	if len(b) != 10+hlen+24 {
		t.Errorf("size %d", len(b))
	}
	if err := Write(&buf, []int{4}, []float32{1}); err == nil {
		t.Error("accepted a shape that does not match the data")
	}
}
