package collector

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// ErrTruncated reports a file whose last gzip member is incomplete (a writer
// was killed mid-record). ReadRecords returns the complete records before it
// together with this error; OpenWriter repairs the file.
var ErrTruncated = errors.New("collector: truncated record file")

// Writer appends records to a .jsonl.gz file, one gzip member per record, and
// syncs after each so that a crash loses at most the record being written.
// It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	keys map[string]bool
	// warmth holds the Warmth of every record (shapes per JVM, for a
	// resumed run's warm flags).
	warmth []*Warmth
	buf    bytes.Buffer
	zw     *gzip.Writer
}

// OpenWriter opens path for appending (creating it and its directory if
// needed). A truncated last member left by a killed writer is cut off first.
// The keys of the records already in the file are loaded: Has reports them,
// and Write refuses to write a key twice.
func OpenWriter(path string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	w := &Writer{f: f, keys: map[string]bool{}}
	good, err := scanMembers(f, func(r *Record) {
		w.keys[r.Key] = true
		if r.Warmth != nil {
			w.warmth = append(w.warmth, r.Warmth)
		}
	})
	if err != nil && !errors.Is(err, ErrTruncated) {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("collector: repair %s: %w", path, err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("collector: %w", err)
	}
	w.zw, _ = gzip.NewWriterLevel(&w.buf, gzip.BestCompression)
	return w, nil
}

// pastWarmth is the Warmth of the records in the file, oldest first.
func (w *Writer) pastWarmth() []*Warmth {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*Warmth(nil), w.warmth...)
}

// Has reports whether a record with this key is already in the file.
func (w *Writer) Has(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[key]
}

// Len is the number of records in the file.
func (w *Writer) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.keys)
}

// ErrDuplicate is returned by Write for a key the file already holds.
var ErrDuplicate = errors.New("collector: duplicate record key")

// Write appends r as one gzip member and syncs the file. Version and Source
// default to RecordVersion and SourceCollector.
func (w *Writer) Write(r *Record) error {
	if r.Key == "" {
		return errors.New("collector: record without key")
	}
	if r.Version == 0 {
		r.Version = RecordVersion
	}
	if r.Source == "" {
		r.Source = SourceCollector
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("collector: encode record %s: %w", r.Key, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[r.Key] {
		return fmt.Errorf("%w: %s", ErrDuplicate, r.Key)
	}
	w.buf.Reset()
	w.zw.Reset(&w.buf)
	w.zw.Write(line)
	w.zw.Write([]byte{'\n'})
	if err := w.zw.Close(); err != nil {
		return fmt.Errorf("collector: %w", err)
	}
	// One write call per member: with O_RDWR at the end offset this is the
	// same as an append, and a crash mid-write leaves a truncated member
	// that the next OpenWriter removes.
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		return fmt.Errorf("collector: write record %s: %w", r.Key, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("collector: sync: %w", err)
	}
	w.keys[r.Key] = true
	return nil
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

// countingReader counts the bytes consumed through it. It implements
// io.ByteReader so that gzip/flate read exactly one member and no further.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// scanMembers decodes the records of r member by member and returns the
// offset just past the last complete member. A bad or incomplete member ends
// the scan with ErrTruncated.
func scanMembers(r io.Reader, fn func(*Record)) (int64, error) {
	cr := &countingReader{r: bufio.NewReaderSize(r, 1<<16)}
	var good int64
	var zr *gzip.Reader
	for {
		if _, err := cr.r.Peek(1); err == io.EOF {
			return good, nil
		}
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(cr)
		} else {
			err = zr.Reset(cr)
		}
		if err != nil {
			return good, fmt.Errorf("%w at byte %d: %v", ErrTruncated, good, err)
		}
		zr.Multistream(false)
		data, err := io.ReadAll(zr)
		if err != nil {
			return good, fmt.Errorf("%w at byte %d: %v", ErrTruncated, good, err)
		}
		for _, line := range bytes.Split(data, []byte{'\n'}) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var rec Record
			if err := json.Unmarshal(line, &rec); err != nil {
				return good, fmt.Errorf("collector: record at byte %d: %w", good, err)
			}
			if rec.Version > RecordVersion {
				return good, fmt.Errorf("collector: record version %d is newer than %d", rec.Version, RecordVersion)
			}
			fn(&rec)
		}
		good = cr.n
	}
}

// ReadRecords calls fn for every record in a .jsonl.gz (or plain .jsonl)
// file, in file order. A truncated last member ends the file with an error
// wrapping ErrTruncated after all complete records were delivered.
func ReadRecords(path string, fn func(*Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("collector: %w", err)
	}
	defer f.Close()
	if !strings.HasSuffix(path, ".gz") {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var rec Record
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				return fmt.Errorf("collector: %s: %w", path, err)
			}
			if err := fn(&rec); err != nil {
				return err
			}
		}
		return sc.Err()
	}
	var ferr error
	_, err = scanMembers(f, func(r *Record) {
		if ferr == nil {
			ferr = fn(r)
		}
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ReadAll reads every record of the given files or directories (all
// *.jsonl.gz files below a directory, in name order). A file with a
// truncated tail (one being written) contributes its complete records and an
// error wrapping ErrTruncated, joined into the returned error after all files
// were read.
func ReadAll(paths ...string) ([]*Record, error) {
	files, err := RecordFiles(paths...)
	if err != nil {
		return nil, err
	}
	var out []*Record
	var errs []error
	for _, p := range files {
		err := ReadRecords(p, func(r *Record) error { out = append(out, r); return nil })
		if errors.Is(err, ErrTruncated) {
			// A file being written right now: keep its complete records.
			errs = append(errs, err)
			continue
		}
		if err != nil {
			return out, err
		}
	}
	return out, errors.Join(errs...)
}

// RecordFiles expands directories into the *.jsonl.gz files below them.
func RecordFiles(paths ...string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("collector: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".jsonl.gz") {
				files = append(files, path)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("collector: %w", err)
		}
	}
	sort.Strings(files)
	return files, nil
}
