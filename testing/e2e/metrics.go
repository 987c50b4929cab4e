package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a /metrics endpoint, parsed by the Prometheus
// text-format parser.
type Metrics map[string]*dto.MetricFamily

var metricsClient = &http.Client{Timeout: 10 * time.Second}

// ReadMetrics GETs base+"/metrics" and parses it.
func ReadMetrics(base string) (Metrics, error) {
	resp, err := metricsClient.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s/metrics: HTTP %d", base, resp.StatusCode)
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s/metrics: %w", base, err)
	}
	return m, nil
}

// ParseMetrics parses an exposition in the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// ScrapeMetrics is ReadMetrics; the test fails when it cannot.
func ScrapeMetrics(t testing.TB, base string) Metrics {
	t.Helper()
	m, err := ReadMetrics(base)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Metric is ScrapeMetrics(t, base).Value(series).
func Metric(t testing.TB, base, series string) (float64, bool) {
	t.Helper()
	return ScrapeMetrics(t, base).Value(series)
}

var selectorLabel = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// Value sums the samples of series: a metric name, or name{k="v",...} as
// exposed. A sample counts when it carries every label given, whatever
// its others; a histogram's or summary's name_count and name_sum read its
// count and sum. ok is false when no sample counts.
func (m Metrics) Value(series string) (float64, bool) {
	name, sel, _ := strings.Cut(series, "{")
	want := map[string]string{}
	for _, kv := range selectorLabel.FindAllStringSubmatch(strings.TrimSuffix(sel, "}"), -1) {
		want[kv[1]] = strings.NewReplacer(`\"`, `"`, `\\`, `\`, `\n`, "\n").Replace(kv[2])
	}
	part := ""
	f := m[name]
	if f == nil {
		for _, suffix := range []string{"_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && m[base] != nil {
				f, part = m[base], suffix
			}
		}
	}
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
	for _, s := range f.GetMetric() {
		if !hasLabels(s, want) {
			continue
		}
		found = true
		switch {
		case s.Counter != nil:
			sum += s.Counter.GetValue()
		case s.Gauge != nil:
			sum += s.Gauge.GetValue()
		case s.Untyped != nil:
			sum += s.Untyped.GetValue()
		case s.Histogram != nil && part == "_count":
			sum += float64(s.Histogram.GetSampleCount())
		case s.Histogram != nil && part == "_sum":
			sum += s.Histogram.GetSampleSum()
		case s.Summary != nil && part == "_count":
			sum += float64(s.Summary.GetSampleCount())
		case s.Summary != nil && part == "_sum":
			sum += s.Summary.GetSampleSum()
		default:
			found = false
		}
	}
	return sum, found
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range s.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
