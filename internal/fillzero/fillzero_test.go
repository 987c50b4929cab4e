package fillzero

import "testing"

type inner struct{ A, B int }

type outer struct {
	Name  string
	N     int
	In    inner
	Ptr   *inner
	Nil   *inner
	Slice []string
	priv  int
}

func TestFill(t *testing.T) {
	src := outer{Name: "default", N: 7, In: inner{A: 1, B: 2}, Ptr: &inner{A: 3, B: 4}, Nil: &inner{A: 5, B: 6}, Slice: []string{"x"}, priv: 9}
	dst := outer{N: -1, In: inner{B: 20}, Ptr: &inner{A: 30}}
	keep := dst.Ptr
	Fill(&dst, src)
	t.Run("zero fields take the default", func(t *testing.T) {
		if dst.Name != "default" || len(dst.Slice) != 1 {
			t.Errorf("got %+v", dst)
		}
	})
	t.Run("set fields keep their value, negative ones too", func(t *testing.T) {
		if dst.N != -1 || dst.In != (inner{A: 1, B: 20}) || *dst.Ptr != (inner{A: 30, B: 4}) {
			t.Errorf("got %+v, ptr %+v", dst, *dst.Ptr)
		}
	})
	t.Run("pointers are copied, never shared", func(t *testing.T) {
		if dst.Nil == src.Nil || *dst.Nil != *src.Nil || dst.Ptr == src.Ptr || *keep != (inner{A: 30}) {
			t.Errorf("dst.Nil %p src.Nil %p, caller's struct now %+v", dst.Nil, src.Nil, *keep)
		}
	})
	t.Run("unexported fields are left alone", func(t *testing.T) {
		if dst.priv != 0 {
			t.Errorf("priv = %d", dst.priv)
		}
	})
}
