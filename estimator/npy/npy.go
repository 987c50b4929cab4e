package npy

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// A minimal writer (and reader, for tests and tools) of NumPy's .npy format
// version 1.0 and of .npz archives (a zip of .npy files), little-endian,
// C order. Supported element types: int8, uint8, int32, int64, float32,
// float64. Layout reference: numpy/lib/format.py.

var npyMagic = []byte("\x93NUMPY")

func npyDescr(data any) (descr string, n int, err error) {
	switch d := data.(type) {
	case []int8:
		return "|i1", len(d), nil
	case []uint8:
		return "|u1", len(d), nil
	case []int32:
		return "<i4", len(d), nil
	case []int64:
		return "<i8", len(d), nil
	case []float32:
		return "<f4", len(d), nil
	case []float64:
		return "<f8", len(d), nil
	}
	return "", 0, fmt.Errorf("estimator: npy: unsupported element type %T", data)
}

// WriteNPY writes data (a flat slice in C order) as an .npy array of the
// given shape; an empty shape is a scalar (data of length 1).
func Write(w io.Writer, shape []int, data any) error {
	descr, n, err := npyDescr(data)
	if err != nil {
		return err
	}
	want := 1
	for _, s := range shape {
		if s < 0 {
			return fmt.Errorf("estimator: npy: negative dimension in %v", shape)
		}
		want *= s
	}
	if want != n {
		return fmt.Errorf("estimator: npy: shape %v needs %d elements, have %d", shape, want, n)
	}
	var sh strings.Builder
	sh.WriteByte('(')
	for i, s := range shape {
		if i > 0 {
			sh.WriteString(", ")
		}
		sh.WriteString(strconv.Itoa(s))
	}
	if len(shape) == 1 {
		sh.WriteByte(',')
	}
	sh.WriteByte(')')
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, sh.String())
	// magic(6) + version(2) + length(2) + header, padded with spaces and a
	// final '\n' to a multiple of 64 bytes.
	total := 10 + len(header) + 1
	pad := (64 - total%64) % 64
	header += strings.Repeat(" ", pad) + "\n"
	if len(header) > math.MaxUint16 {
		return fmt.Errorf("estimator: npy: header too long")
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(npyMagic)
	bw.Write([]byte{1, 0})
	binary.Write(bw, binary.LittleEndian, uint16(len(header)))
	bw.WriteString(header)
	if err := binary.Write(bw, binary.LittleEndian, data); err != nil {
		return fmt.Errorf("estimator: npy: %w", err)
	}
	return bw.Flush()
}

// NPZWriter writes an .npz archive. Entries are deflated and carry a fixed
// timestamp, so equal inputs give byte-identical files.
type NPZWriter struct {
	zw *zip.Writer
}

// NewNPZWriter starts an archive on w; call Close to finish it.
func NewNPZWriter(w io.Writer) *NPZWriter { return &NPZWriter{zw: zip.NewWriter(w)} }

var npzTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Add writes one array; name gets the ".npy" suffix (np.load's key is name).
func (z *NPZWriter) Add(name string, shape []int, data any) error {
	f, err := z.zw.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: zip.Deflate, Modified: npzTime})
	if err != nil {
		return fmt.Errorf("estimator: npz: %w", err)
	}
	return Write(f, shape, data)
}

// Close finishes the archive (it does not close the underlying writer).
func (z *NPZWriter) Close() error { return z.zw.Close() }

// NPYArray is an array read by ReadNPY.
type Array struct {
	Descr string
	Shape []int
	Data  any // []int8, []uint8, []int32, []int64, []float32 or []float64
}

// ReadNPY reads an .npy array written by WriteNPY (version 1.0/2.0, C
// order, the element types above). It is meant for tests and tools.
func Read(r io.Reader) (*Array, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("estimator: npy: %w", err)
	}
	if string(pre[:6]) != string(npyMagic) {
		return nil, errors.New("estimator: npy: bad magic")
	}
	var hlen int
	switch pre[6] {
	case 1:
		var l uint16
		if err := binary.Read(r, binary.LittleEndian, &l); err != nil {
			return nil, err
		}
		hlen = int(l)
	case 2, 3:
		var l uint32
		if err := binary.Read(r, binary.LittleEndian, &l); err != nil {
			return nil, err
		}
		if l > 1<<20 {
			return nil, errors.New("estimator: npy: header too long")
		}
		hlen = int(l)
	default:
		return nil, fmt.Errorf("estimator: npy: version %d", pre[6])
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, err
	}
	h := string(hb)
	a := &Array{}
	if i := strings.Index(h, "'descr': '"); i >= 0 {
		rest := h[i+10:]
		a.Descr = rest[:strings.IndexByte(rest, '\'')]
	}
	if strings.Contains(h, "'fortran_order': True") {
		return nil, errors.New("estimator: npy: fortran order not supported")
	}
	i := strings.Index(h, "'shape': (")
	if i < 0 {
		return nil, errors.New("estimator: npy: no shape")
	}
	rest := h[i+10:]
	rest = rest[:strings.IndexByte(rest, ')')]
	n := 1
	for _, f := range strings.Split(rest, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("estimator: npy: bad shape %q", rest)
		}
		a.Shape = append(a.Shape, v)
		n *= v
	}
	if n > 1<<28 {
		return nil, errors.New("estimator: npy: array too large")
	}
	switch a.Descr {
	case "|i1":
		a.Data = make([]int8, n)
	case "|u1":
		a.Data = make([]uint8, n)
	case "<i4":
		a.Data = make([]int32, n)
	case "<i8":
		a.Data = make([]int64, n)
	case "<f4":
		a.Data = make([]float32, n)
	case "<f8":
		a.Data = make([]float64, n)
	default:
		return nil, fmt.Errorf("estimator: npy: unsupported descr %q", a.Descr)
	}
	if err := binary.Read(r, binary.LittleEndian, a.Data); err != nil {
		return nil, fmt.Errorf("estimator: npy: %w", err)
	}
	return a, nil
}

// ReadNPZ reads every array of an .npz archive, keyed by name without ".npy".
func ReadNPZ(r io.ReaderAt, size int64) (map[string]*Array, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("estimator: npz: %w", err)
	}
	out := map[string]*Array{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		a, err := Read(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, f.Name)
		}
		out[strings.TrimSuffix(f.Name, ".npy")] = a
	}
	return out, nil
}
