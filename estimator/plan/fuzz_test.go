package plan

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeQueryResults: the page decoder never panics, and whatever it
// accepts encoding/json accepts too, with the same plan.
func FuzzDecodeQueryResults(f *testing.F) {
	for _, s := range []string{`{"id":"q","data":[["{\"0\" : {}}"]]}`, `{"data":[["a\u00e9\n"],["b"]],"stats":{"state":"FINISHED"}}`,
		`{"data":null}`, `{"data":[[1,2]]}`, `{"error":{"message":"x"}}`, `{"data":[["\ud800"]]}`, `{}`, `[]`, `{"data":[[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		qr, err := decodeQueryResults(b)
		if err != nil {
			return
		}
		var ref struct{ Data [][]any }
		if jerr := json.Unmarshal(b, &ref); jerr != nil {
			t.Fatalf("accepted %q, encoding/json: %v", b, jerr)
		}
		if qr.plan != nil {
			if s, ok := ref.Data[0][0].(string); !ok || s != string(qr.plan) {
				t.Fatalf("plan %q, encoding/json %q", qr.plan, ref.Data[0][0])
			}
		}
	})
}
