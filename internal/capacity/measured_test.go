package capacity

import (
	"math"
	"testing"
)

// The committed figures hold every path and feature the default scenario
// needs, and the model run at a measured replica's own rate gives back
// what was measured: one path alone at one core's rate is one core busy;
// one feature alone, on the path it was measured on, at 1,000
// statements/s is 1,000 × its ops, bytes and proxy CPU.
func TestMeasuredFiguresReproduce(t *testing.T) {
	f, err := Measured()
	if err != nil {
		t.Fatal(err)
	}
	if f.Provenance.Date == "" || f.Provenance.Command == "" {
		t.Errorf("figures without provenance: %+v", f.Provenance)
	}
	for _, p := range MixPaths {
		c, ok := f.Paths[p]
		if !ok || c.CPUSeconds <= 0 || c.Statements == 0 {
			t.Errorf("path %s: %+v", p, c)
			continue
		}
		if c.Share < 0.9 {
			t.Errorf("path %s: only %.0f%% of its statements took it", p, 100*c.Share)
		}
		rate := 1 / c.CPUSeconds // statements/s one core does on this path
		a, err := f.Model(Scenario{Rate: rate, Mix: map[string]float64{p: 1}, CoresPerReplica: 1, TargetUtil: 1})
		if err != nil {
			t.Fatal(err)
		}
		near(t, p+" CPUCores", a.CPUCores, 1, 1e-9)
		if a.Replicas != 1 {
			t.Errorf("%s: %d replicas at one core's rate", p, a.Replicas)
		}
		near(t, p+" ExplainsPerSec", a.ExplainsPerSec, rate*c.Explains, 1e-9)
	}
	for _, feat := range []string{FeatureAdmission, FeatureRateLimit, FeatureUsage} {
		c, ok := f.Redis[feat]
		if !ok || c.TotalOps() <= 0 {
			t.Errorf("feature %s: %+v", feat, c)
			continue
		}
		f0 := f
		f0.RedisIdle = RedisCost{} // per statement only
		base := PathPassthrough    // the path the feature was measured on
		if c.BasePath != "" {
			base = c.BasePath
		}
		a, err := f0.Model(Scenario{Rate: 1000, Mix: map[string]float64{base: 1}, Features: []string{feat}})
		if err != nil {
			t.Fatal(err)
		}
		near(t, feat+" OpsPerSec", a.Redis[0].OpsPerSec, 1000*c.TotalOps(), 1e-9)
		near(t, feat+" BytesInPerSec", a.Redis[0].BytesInPerSec, 1000*c.BytesIn, 1e-9)
		near(t, feat+" CPUCores", a.CPUCores, 1000*c.ProxyCPUSeconds, 1e-9)
	}
	for _, k := range []string{FeatureHistoryFirst, FeatureHistoryRepeat} {
		if f.Redis[k].TotalOps() <= 0 {
			t.Errorf("feature %s not measured", k)
		}
	}
	for _, op := range []string{"GET", "EVALSHA enter.lua", "EVALSHA ratelimit.lua", "EVALSHA redis_cas.lua"} {
		if f.RedisCeiling[op] <= 0 {
			t.Errorf("no ceiling for %s", op)
		}
	}
}

// The check run had every feature on at once: the model's sum of the
// separately measured features, at the check's own mix of paths, gives
// the ops it measured within 15% and the proxy CPU within 40% (the CPU
// figures come from separate runs on a shared machine).
func TestMeasuredCheckRunAgreesWithTheModel(t *testing.T) {
	f, err := Measured()
	if err != nil {
		t.Fatal(err)
	}
	c := f.Check
	if c == nil || c.Statements == 0 {
		t.Fatal("no check run in the figures")
	}
	f.RedisIdle = RedisCost{} // the check's quiet rates were subtracted
	a, err := f.Model(Scenario{Rate: 1, Mix: c.Mix, Features: c.Features, CoresPerReplica: 1, TargetUtil: 1})
	if err != nil {
		t.Fatal(err)
	}
	ops := a.Redis[0].OpsPerSec
	if math.Abs(ops-c.Redis.TotalOps()) > 0.15*c.Redis.TotalOps() {
		t.Errorf("Redis ops per statement: model %.2f, measured %.2f", ops, c.Redis.TotalOps())
	}
	if math.Abs(a.CPUCores-c.CPUSeconds) > 0.4*c.CPUSeconds {
		t.Errorf("proxy CPU per statement: model %.3f ms, measured %.3f ms", 1000*a.CPUCores, 1000*c.CPUSeconds)
	}
	t.Logf("per statement: Redis ops model %.2f, measured %.2f; proxy CPU model %.3f ms, measured %.3f ms",
		ops, c.Redis.TotalOps(), 1000*a.CPUCores, 1000*c.CPUSeconds)
}
