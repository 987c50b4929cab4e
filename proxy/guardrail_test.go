package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/guardrail"
)

// guardedPost sends sql as a new statement with headers h and decodes the
// answer's error object.
func guardedPost(t *testing.T, base, sql string, h map[string]string) (*http.Response, queryError) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(sql))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var page struct {
		Stats struct{ State string }
		Error *queryError
	}
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if page.Error == nil {
		return resp, queryError{}
	}
	if page.Stats.State != "FAILED" {
		t.Errorf("an error page in state %q", page.Stats.State)
	}
	return resp, *page.Error
}

type queryError struct {
	Message, ErrorName, ErrorType string
	ErrorCode                     int
}

// TestGuardrails: a guardrail refuses a statement whose estimate is over
// its limit with a failed query and sends nothing to the cluster; the
// override tag (in the client's dialect), dry run and a failed estimate
// let it through; each is counted and the console lists the refusals.
func TestGuardrails(t *testing.T) {
	c := newCoordinator(t)
	client, admin, _ := consoleProxy(t, c.URL, Options{Estimator: &fixedEstimator{}, ConsoleDecisions: 10,
		Guardrails: []guardrail.Rule{
			{Name: "adhoc-cpu", User: "alice|bob", Target: estimate.TargetCPU, Limit: 60, OverrideTag: "big-ok"},
			{Name: "shadow-cpu", User: "carol", Target: estimate.TargetCPU, Limit: 60, DryRun: true},
			{Name: "memory", User: "alice", Target: estimate.TargetMemory, Limit: 1 << 30},
		}})
	sent := func() bool { return c.lastPost.Swap(nil) != nil }
	trino := func(user string, more ...string) map[string]string {
		h := map[string]string{"X-Trino-User": user}
		for i := 0; i+1 < len(more); i += 2 {
			h[more[i]] = more[i+1]
		}
		return h
	}

	t.Run("a statement over the limit is refused with PRESTROID_GUARDRAIL and never reaches the cluster", func(t *testing.T) {
		resp, e := guardedPost(t, client, "SELECT big -- cpu=120", trino("alice", "X-Trino-Client-Tags", "etl"))
		if resp.StatusCode != 200 || e.ErrorName != guardrail.ErrorName || e.ErrorType != "USER_ERROR" {
			t.Fatalf("%d %+v", resp.StatusCode, e)
		}
		for _, w := range []string{`"adhoc-cpu"`, "CPU time at quantile 0.5 is 2m0s", "limit of 1m0s", `client tag "big-ok"`} {
			if !strings.Contains(e.Message, w) {
				t.Errorf("message %q lacks %q", e.Message, w)
			}
		}
		if resp.Header.Get("X-Prestroid-Guardrail") != "adhoc-cpu" || !strings.Contains(resp.Header.Get("X-Prestroid-Estimate"), "cpu=120") {
			t.Errorf("headers %v", resp.Header)
		}
		if sent() {
			t.Error("the refused statement reached the cluster")
		}
	})
	t.Run("the override tag lets it through", func(t *testing.T) {
		if _, e := guardedPost(t, client, "SELECT big -- cpu=120", trino("bob", "X-Trino-Client-Tags", "etl, big-ok")); e.ErrorName != "" || !sent() {
			t.Errorf("override refused or not sent: %+v", e)
		}
	})
	t.Run("a PrestoDB client's override tag is read under its own header", func(t *testing.T) {
		h := map[string]string{"X-Presto-User": "bob", "X-Presto-Client-Tags": "big-ok"}
		if _, e := guardedPost(t, client, "SELECT big -- cpu=120", h); e.ErrorName != "" || !sent() {
			t.Errorf("override refused or not sent: %+v", e)
		}
		h = map[string]string{"X-Presto-User": "bob", "X-Presto-Client-Tags": "etl"}
		if _, e := guardedPost(t, client, "SELECT big -- cpu=120", h); e.ErrorName != guardrail.ErrorName || sent() {
			t.Errorf("a PrestoDB client without the tag was not refused: %+v", e)
		}
	})
	t.Run("a statement within the limit, or of a user no rule matches, runs", func(t *testing.T) {
		for _, u := range []string{"alice", "dave"} {
			sql := "SELECT small -- cpu=30"
			if u == "dave" {
				sql = "SELECT big -- cpu=120"
			}
			if _, e := guardedPost(t, client, sql, trino(u)); e.ErrorName != "" || !sent() {
				t.Errorf("%s: %+v", u, e)
			}
		}
	})
	t.Run("a dry-run rule only counts", func(t *testing.T) {
		if _, e := guardedPost(t, client, "SELECT big -- cpu=120", trino("carol")); e.ErrorName != "" || !sent() {
			t.Errorf("dry run refused or not sent: %+v", e)
		}
	})
	t.Run("a failed estimate fails open", func(t *testing.T) {
		if _, e := guardedPost(t, client, "SELECT fail", trino("alice")); e.ErrorName != "" || !sent() {
			t.Errorf("failed estimate refused or not sent: %+v", e)
		}
	})

	t.Run("each outcome is counted by rule", func(t *testing.T) {
		resp, err := http.Get(admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, w := range []string{
			`prestroid_guardrail_decisions_total{outcome="refused",rule="adhoc-cpu"} 2`,
			`prestroid_guardrail_decisions_total{outcome="override",rule="adhoc-cpu"} 2`,
			`prestroid_guardrail_decisions_total{outcome="dry_run",rule="shadow-cpu"} 1`,
			`prestroid_guardrail_decisions_total{outcome="fail_open",rule="adhoc-cpu"} 1`,
			// alice's estimates predict no memory: fail open, each time
			// the rule was reached (not after adhoc-cpu refused).
			`prestroid_guardrail_decisions_total{outcome="fail_open",rule="memory"} 2`,
			`prestroid_guardrail_decisions_total{outcome="refused",rule="memory"} 0`,
		} {
			if !strings.Contains(string(b), w) {
				t.Errorf("/metrics lacks %s", w)
			}
		}
	})

	t.Run("the console lists refusals and dry-run hits, newest first", func(t *testing.T) {
		var v struct {
			Rules []struct {
				Name, Target string
				LimitText    string `json:"limit_text"`
			}
			Total  int
			Events []guardrail.Event
		}
		if st := getJSON(t, admin+"/prestroid/api/guardrails", "", &v); st != 200 {
			t.Fatalf("status %d", st)
		}
		if len(v.Rules) != 3 || v.Rules[0].Name != "adhoc-cpu" || v.Rules[2].LimitText != "1GB" || v.Total != 3 || len(v.Events) != 3 {
			t.Fatalf("%+v", v)
		}
		e := v.Events[0]
		if e.Outcome != "dry_run" || e.User != "carol" || v.Events[2].Outcome != "refused" || v.Events[2].User != "alice" ||
			v.Events[2].EstimateText != "2m0s" || v.Events[2].LimitText != "1m0s" || v.Events[2].SQL != "SELECT big -- cpu=120" {
			t.Errorf("%+v", v.Events)
		}
	})
}

// TestGuardrailRefusalTakesNoAdmissionSlot: a refused statement is judged
// before admission, so it neither waits nor holds a slot.
func TestGuardrailRefusalTakesNoAdmissionSlot(t *testing.T) {
	c := newCoordinator(t)
	client, _, _ := consoleProxy(t, c.URL, Options{Estimator: &fixedEstimator{}, Admission: &admission.Options{MaxQueries: 1},
		Guardrails: []guardrail.Rule{{Name: "cpu", Target: estimate.TargetCPU, Limit: 60}}})
	for range 3 {
		if _, e := guardedPost(t, client, "SELECT big -- cpu=120", map[string]string{"X-Trino-User": "alice"}); e.ErrorName != guardrail.ErrorName {
			t.Fatalf("not refused: %+v", e)
		}
	}
	if _, e := guardedPost(t, client, "SELECT small -- cpu=1", map[string]string{"X-Trino-User": "alice"}); e.ErrorName != "" || c.lastPost.Load() == nil {
		t.Errorf("the one admission slot was taken by refused statements: %+v, sent %v", e, c.lastPost.Load() != nil)
	}
}
