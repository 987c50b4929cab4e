package estimator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
)

// fakePresto answers EXPLAINs as PrestoDB does (its plan has no cpuCost;
// the scan's outputRowCount is the number in the statement's "rows N"
// comment) and records whether every request came in its dialect.
type fakePresto struct {
	mu       sync.Mutex
	explains int
	badHdr   []string
}

var rowsComment = regexp.MustCompile(`rows ([0-9.e+]+)`)

func (f *fakePresto) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	for k := range r.Header {
		if dialect.OfHeader(k) == dialect.Trino {
			f.badHdr = append(f.badHdr, k)
		}
	}
	if r.Header.Get("X-Presto-User") == "" {
		f.badHdr = append(f.badHdr, "no X-Presto-User")
	}
	f.mu.Unlock()
	page := func(v any) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		json.NewEncoder(zw).Encode(v)
		zw.Close()
	}
	if r.Method != http.MethodPost {
		page(map[string]any{"id": "q1", "stats": map[string]any{"state": "FINISHED"}})
		return
	}
	f.mu.Lock()
	f.explains++
	f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	rows := "100"
	if m := rowsComment.FindSubmatch(body); m != nil {
		rows = string(m[1])
	}
	planJSON := `{"0": {"plan": {"id": "1", "name": "TableScan", "identifier": "[TableHandle {connectorId='tpch', connectorHandle='orders:sf1.0', layout='Optional[orders:sf1.0]'}, grouped = false]",` +
		`"details": "", "children": [], "remoteSources": [], "estimates": [{"outputRowCount": ` + rows + `, "totalSize": "NaN", "confident": "HIGH"}]}}}`
	page(map[string]any{"id": "q1", "data": [][]string{{planJSON}}, "stats": map[string]any{"state": "FINISHED"}})
}

func TestEngineSeparatesKeys(t *testing.T) {
	const sql = "SELECT * FROM orders WHERE orderkey = 1"
	fp := Fingerprint(sql)
	t.Run("Trino's keys are what they were", func(t *testing.T) {
		x, s := HistoryKeys(sql, alice)
		for _, e := range []dialect.Engine{dialect.Trino, dialect.Unknown} {
			if x2, s2, _ := historyKeys(sql, e, fp, alice); x2 != x || s2 != s {
				t.Errorf("%s: history keys changed", e)
			}
			if estimateKey("m", e, fp, alice) != EstimateKey("m", sql, alice) {
				t.Errorf("%s: estimate key changed", e)
			}
			if globalKey(keyOptimizer, e) != keyOptimizer {
				t.Errorf("%s: %s", e, globalKey(keyOptimizer, e))
			}
		}
	})
	t.Run("the same statement on PrestoDB has keys of its own", func(t *testing.T) {
		x, s := HistoryKeys(sql, alice)
		px, ps, _ := historyKeys(sql, dialect.Presto, fp, alice)
		if px == x || ps == s || px[:len(keyExact)] != keyExact || ps[:len(keyShape)] != keyShape {
			t.Errorf("history keys not separated or misprefixed")
		}
		if estimateKey("m", dialect.Presto, fp, alice) == EstimateKey("m", sql, alice) {
			t.Error("estimate keys not separated")
		}
		for _, k := range []string{keyModel, keyText, keyOptimizer} {
			if globalKey(k, dialect.Presto) != k+":presto" {
				t.Errorf("%s: %s", k, globalKey(k, dialect.Presto))
			}
		}
	})
	t.Run("a basis carries the engine, and a Trino basis's bytes are unchanged", func(t *testing.T) {
		b := &Basis{Exact: "x", Shape: "s", LnModel: 1, LnCost: math.NaN(), LnText: math.NaN(), Engine: dialect.Trino}
		if w := MarshalBasis(b); bytes.Contains(w, []byte(`"e"`)) {
			t.Errorf("Trino basis %s", w)
		}
		b.Engine = dialect.Presto
		if got := UnmarshalBasis(MarshalBasis(b)); got == nil || got.Engine != dialect.Presto {
			t.Errorf("round trip: %+v", got)
		}
	})
}

func estimatePresto(s *Service, planners []string, sql string) (*estimate.Estimate, error) {
	return s.EstimateFor(context.Background(), dialect.Presto, planners, sql, alice)
}

func TestCascadeOnPresto(t *testing.T) {
	t.Run("the EXPLAIN speaks PrestoDB's dialect and the model reads its plan", func(t *testing.T) {
		f := &fakePresto{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		var seen []byte
		s := newCascade(t, defaults, func(p []byte) (*estimate.Estimate, error) {
			seen = p
			return &estimate.Estimate{Estimated: true, CPUSeconds: 2}, nil
		})
		e, err := estimatePresto(s, []string{srv.URL}, "SELECT * FROM orders")
		if err != nil || e.Source != estimate.SourceModel || len(seen) == 0 {
			t.Fatalf("%+v %v", e, err)
		}
		if b := basisOf(e); b.Engine != dialect.Presto || math.Abs(b.LnCost-math.Log1p(100)) > 1e-9 {
			t.Errorf("basis %+v: want PrestoDB's with ln(1+rows)", b)
		}
		if len(f.badHdr) > 0 {
			t.Errorf("requests not in PrestoDB's dialect: %v", f.badHdr)
		}
	})
	t.Run("history answers a repeat without an EXPLAIN, apart from Trino's", func(t *testing.T) {
		f := &fakePresto{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := newCascade(t, defaults, constModel(1))
		for range defaults.MinCount {
			e, err := estimatePresto(s, []string{srv.URL}, "SELECT count(*) FROM lineitem")
			if err != nil {
				t.Fatal(err)
			}
			s.Observe(basisOf(e), estimate.Actual{CPUSeconds: 8})
		}
		s.Flush()
		e, err := estimatePresto(s, []string{srv.URL}, "SELECT count(*) FROM lineitem")
		if err != nil || e.Source != estimate.SourceHistory || math.Abs(e.CPUSeconds-8) > 1e-6 || f.explains != defaults.MinCount {
			t.Fatalf("%+v %v after %d EXPLAINs; want history's 8 s without a third", e, err, f.explains)
		}
		if ex, _ := s.learn.get(basisOf(e).Exact); ex.Count == 0 {
			t.Error("no history under PrestoDB's key")
		}
		x, _ := HistoryKeys("SELECT count(*) FROM lineitem", alice)
		if _, ok := s.learn.get(x); ok {
			t.Error("PrestoDB's runs were learned under Trino's key")
		}
	})
	t.Run("the optimizer stage maps row counts to seconds with PrestoDB's own calibration", func(t *testing.T) {
		f := &fakePresto{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := newCascade(t, defaults, nil) // the model fails
		for i := range defaults.MinCalibration {
			rows := math.Pow(10, 4+float64(i%4))
			_, err := estimatePresto(s, []string{srv.URL}, fmt.Sprintf("SELECT * FROM t%d /* rows %g */", i, rows))
			var ue *UnplacedError
			if !errors.As(err, &ue) || ue.Basis.Engine != dialect.Presto {
				t.Fatalf("query %d: %v; want an UnplacedError with PrestoDB's basis", i, err)
			}
			s.Observe(ue.Basis, estimate.Actual{CPUSeconds: rows / 10000}) // one CPU second per 10,000 rows
		}
		s.Flush()
		e, err := estimatePresto(s, []string{srv.URL}, "SELECT * FROM fresh /* rows 500000 */")
		if err != nil || e.Source != estimate.SourceOptimizer || math.Abs(e.CPUSeconds/50-1) > 0.05 {
			t.Fatalf("%+v %v; want the optimizer's ≈ 50 s", e, err)
		}
		if _, ok := s.learn.get(keyOptimizer); ok {
			t.Error("PrestoDB's row counts taught Trino's cpuCost calibration")
		}
	})
}
