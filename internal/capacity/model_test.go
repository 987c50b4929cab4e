package capacity

import (
	"math"
	"strings"
	"testing"
)

// synthetic is a small set of figures whose answers are worked out by hand.
func synthetic() Figures {
	return Figures{
		Paths: map[string]PathCost{
			PathPassthrough: {CPUSeconds: 0.0002},
			PathText:        {CPUSeconds: 0.001},
			PathExplain:     {CPUSeconds: 0.004, Explains: 1, ExplainSeconds: 0.1},
			PathHistory:     {CPUSeconds: 0.0005},
			PathCache:       {CPUSeconds: 0.0003},
			PathTextLearn:   {CPUSeconds: 0.002, Explains: 1}, // in the background: not timed
		},
		Redis: map[string]RedisCost{
			FeatureAdmission: {Ops: map[string]float64{"EVALSHA enter.lua": 1, "EVALSHA release.lua": 1}, RoundTrips: 2,
				BytesIn: 800, BytesOut: 10, ProxyCPUSeconds: 0.0003},
			FeatureHistoryFirst:  {Ops: map[string]float64{"GET": 4, "MGET": 2, "EVALSHA redis_cas.lua": 1}, RoundTrips: 7, BytesIn: 3000},
			FeatureHistoryRepeat: {Ops: map[string]float64{"GET": 2, "MGET": 2, "EVALSHA redis_cas.lua": 1}, RoundTrips: 5, BytesIn: 2000},
		},
		RedisCeiling: map[string]float64{"GET": 100000, "MGET": 100000, "EVALSHA enter.lua": 10000,
			"EVALSHA release.lua": 20000, "EVALSHA redis_cas.lua": 50000},
	}
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestModelArithmetic(t *testing.T) {
	f := synthetic()
	a, err := f.Model(Scenario{Rate: 1000, Mix: map[string]float64{PathText: 1, PathExplain: 1}, Features: []string{FeatureAdmission}})
	if err != nil {
		t.Fatal(err)
	}
	// CPU: 1000 × (½·1 ms + ½·4 ms + admission's 0.3 − 0.2 ms beyond the pass-through floor).
	near(t, "CPUCores", a.CPUCores, 2.6, 1e-9)
	if a.Replicas != 3 { // 2.6 / (2 cores × 0.6)
		t.Errorf("Replicas = %d, want 3", a.Replicas)
	}
	if len(a.Redis) != 1 {
		t.Fatalf("Redis instances %+v, want one", a.Redis)
	}
	r := a.Redis[0]
	near(t, "OpsPerSec", r.OpsPerSec, 2000, 1e-9)
	near(t, "RoundTripsPerSec", r.RoundTripsPerSec, 2000, 1e-9)
	near(t, "BytesInPerSec", r.BytesInPerSec, 800000, 1e-9)
	near(t, "Util", r.Util, 1000*(1.0/10000+1.0/20000), 1e-9)
	near(t, "SaturatesAt", r.SaturatesAt, 1/(1.0/10000+1.0/20000), 1e-6)
	// EXPLAIN: half the statements, 0.1 s each: 50 in flight of 16 slots.
	near(t, "ExplainsPerSec", a.ExplainsPerSec, 500, 1e-9)
	near(t, "ExplainsInFlight", a.ExplainsInFlight, 50, 1e-9)
	near(t, "ExplainUtil", a.ExplainUtil, 50.0/16, 1e-9)
	near(t, "ExplainSaturatesAt", a.ExplainSaturatesAt, 320, 1e-9)
	if a.FirstBottleneck != "coordinators' EXPLAIN slots" || a.BottleneckAt != 320 {
		t.Errorf("first bottleneck %q at %v, want the coordinators at 320", a.FirstBottleneck, a.BottleneckAt)
	}

	// More clusters: the EXPLAIN slots scale, Redis becomes the first.
	a, _ = f.Model(Scenario{Rate: 1000, Mix: map[string]float64{PathText: 1, PathExplain: 1}, Features: []string{FeatureAdmission}, Clusters: 50})
	if a.FirstBottleneck != "redis" {
		t.Errorf("with 50 clusters the first bottleneck is %q, want redis", a.FirstBottleneck)
	}
	near(t, "BottleneckAt", a.BottleneckAt, 1/(1.0/10000+1.0/20000), 1e-6)
}

// A background EXPLAIN, untimed, holds a coordinator slot as long as a
// hot-path one.
func TestModelBackgroundExplainTakesTheHotPathsTime(t *testing.T) {
	a, err := synthetic().Model(Scenario{Rate: 100, Mix: map[string]float64{PathTextLearn: 1}})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "ExplainsPerSec", a.ExplainsPerSec, 100, 1e-9)
	near(t, "ExplainsInFlight", a.ExplainsInFlight, 10, 1e-9)
	// A coordinator that plans in 20 ms instead.
	a, _ = synthetic().Model(Scenario{Rate: 100, Mix: map[string]float64{PathTextLearn: 1}, ExplainWall: 0.02})
	near(t, "ExplainsInFlight", a.ExplainsInFlight, 2, 1e-9)
	near(t, "ExplainSaturatesAt", a.ExplainSaturatesAt, 800, 1e-9)
}

func TestModelMixIsNormalized(t *testing.T) {
	f := synthetic()
	a, _ := f.Model(Scenario{Rate: 500, Mix: map[string]float64{PathText: 2, PathHistory: 2}})
	b, _ := f.Model(Scenario{Rate: 500, Mix: map[string]float64{PathText: 0.5, PathHistory: 0.5}})
	near(t, "CPUCores", a.CPUCores, b.CPUCores, 1e-12)
	near(t, "CPUCores", a.CPUCores, 500*(0.001+0.0005)/2, 1e-9)
	if len(a.Redis) != 0 || !math.IsInf(a.ExplainSaturatesAt, 1) || a.FirstBottleneck != "none" {
		t.Errorf("no feature, no EXPLAIN: Redis %v, EXPLAIN saturates at %v, first bottleneck %q", a.Redis, a.ExplainSaturatesAt, a.FirstBottleneck)
	}
}

// The history's cost is by path: a repeat the history answers costs the
// repeat's figures, every other path the first sight's; on a Redis of
// its own it leaves the other instance.
func TestModelHistoryByPathAndOwnRedis(t *testing.T) {
	f := synthetic()
	s := Scenario{Rate: 1000, Mix: map[string]float64{PathHistory: 0.5, PathText: 0.5},
		Features: []string{FeatureAdmission, FeatureHistory}}
	a, err := f.Model(s)
	if err != nil {
		t.Fatal(err)
	}
	// admission 2 + ½·7 + ½·5 ops per statement.
	near(t, "OpsPerSec", a.Redis[0].OpsPerSec, 1000*(2+3.5+2.5), 1e-9)
	s.Redises = []string{FeatureHistory}
	a, _ = f.Model(s)
	if len(a.Redis) != 2 || a.Redis[0].Name != "redis" || a.Redis[1].Name != "redis[history]" {
		t.Fatalf("instances %+v, want redis and redis[history]", a.Redis)
	}
	a.Redis[0], a.Redis[1] = a.Redis[1], a.Redis[0]
	near(t, "history OpsPerSec", a.Redis[0].OpsPerSec, 1000*6, 1e-9)
	near(t, "state OpsPerSec", a.Redis[1].OpsPerSec, 1000*2, 1e-9)
	hist := 0.5*(4.0/100000+2.0/100000+1.0/50000) + 0.5*(2.0/100000+2.0/100000+1.0/50000)
	near(t, "history Util", a.Redis[0].Util, 1000*hist, 1e-9)
}

// An op with no ceiling of its own: a script costs as the heaviest
// script measured, a plain command as GET.
func TestModelUnmeasuredOps(t *testing.T) {
	f := synthetic()
	got := f.threadSeconds(map[string]float64{"EVALSHA sweep.lua": 1, "HINCRBYFLOAT": 10})
	near(t, "threadSeconds", got, 1.0/10000+10.0/100000, 1e-12)
	// With the usage transaction measured whole, its commands cost
	// nothing apart and the EXEC its measured cost.
	f.RedisCeiling["EXEC"] = 25000
	got = f.threadSeconds(map[string]float64{"MULTI": 1, "HINCRBYFLOAT": 12, "HINCRBY": 3, "EXPIRE": 3, "EXEC": 1, "SET": 1})
	near(t, "threadSeconds", got, 1.0/25000+1.0/100000, 1e-12)
	// Twice the commands inside: twice the transaction's cost.
	got = f.threadSeconds(map[string]float64{"MULTI": 1, "HINCRBYFLOAT": 24, "HINCRBY": 6, "EXPIRE": 6, "EXEC": 1})
	near(t, "threadSeconds", got, 2.0/25000, 1e-12)
}

// The replicas' background ops (per replica per second) count against
// Redis, so the saturation rate accounts for the replicas that rate needs.
func TestModelIdleOpsAndSaturation(t *testing.T) {
	f := synthetic()
	f.RedisIdle = RedisCost{Ops: map[string]float64{"GET": 1000}} // 1% of a core per replica
	s := Scenario{Rate: 500, Mix: map[string]float64{PathText: 1}, Features: []string{FeatureAdmission}, CoresPerReplica: 1, TargetUtil: 1}
	a, _ := f.Model(s)
	if a.Replicas != 1 {
		t.Fatalf("Replicas = %d, want 1", a.Replicas)
	}
	near(t, "Util", a.Redis[0].Util, 0.075+0.01, 1e-9) // 0.55 cores: one replica
	// At the saturation rate R: R·1.5e-4 + ceil(R·1.1e-3)·0.01 = 1.
	r := a.Redis[0].SaturatesAt
	u := r*1.5e-4 + math.Ceil(r*1.1e-3)*0.01
	near(t, "util at SaturatesAt", u, 1, 1e-3)
	if r >= 1/1.5e-4 {
		t.Errorf("SaturatesAt %v not below the no-idle %v", r, 1/1.5e-4)
	}
}

func TestSaturation(t *testing.T) {
	near(t, "linear", saturation(func(r float64) float64 { return r / 1234 }), 1234, 1e-9)
	if v := saturation(func(float64) float64 { return 0 }); !math.IsInf(v, 1) {
		t.Errorf("never saturating: %v", v)
	}
}

func TestModelErrors(t *testing.T) {
	f := synthetic()
	for _, s := range []Scenario{
		{Rate: 1, Mix: map[string]float64{}},
		{Rate: 1, Mix: map[string]float64{PathText: -1, PathHistory: 2}},
		{Rate: 1, Mix: map[string]float64{"bogus": 1}},                                    // not in the figures
		{Rate: 1, Mix: map[string]float64{PathText: 1}, Features: []string{FeatureUsage}}, // not in the figures
	} {
		if _, err := f.Model(s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if _, err := ParseMix("text=0.5,bogus=0.5"); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("ParseMix unknown path: %v", err)
	}
	if _, err := ParseMix("text"); err == nil {
		t.Error("ParseMix without a share: no error")
	}
	m, err := ParseMix(DefaultMix)
	if err != nil || len(m) != 5 {
		t.Errorf("ParseMix(DefaultMix) = %v, %v", m, err)
	}
}

// The history's cost of a text-stage first sight is its own figure when
// measured (history_text), the explained first sight's otherwise; a
// repeat keeps the repeat's.
func TestHistoryTextFigure(t *testing.T) {
	f := synthetic()
	ops := func(path string) float64 {
		t.Helper()
		a, err := f.Model(Scenario{Rate: 1000, Mix: map[string]float64{path: 1}, Features: []string{FeatureHistory}})
		if err != nil {
			t.Fatal(err)
		}
		return a.Redis[0].OpsPerSec
	}
	near(t, "text, no history_text", ops(PathText), 7000, 1e-9)
	f.Redis[FeatureHistoryText] = RedisCost{Ops: map[string]float64{"MGET": 3, "EVALSHA redis_cas.lua": 1}, RoundTrips: 4}
	near(t, "text", ops(PathText), 4000, 1e-9)
	near(t, "text with a background EXPLAIN", ops(PathTextLearn), 4000, 1e-9)
	near(t, "explain", ops(PathExplain), 7000, 1e-9)
	near(t, "history", ops(PathHistory), 5000, 1e-9)
}
