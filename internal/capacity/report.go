package capacity

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// DefaultMix is `prestroid bench capacity-model`'s mix: a fleet where
// dashboards and scheduled jobs repeat (answered by the estimate cache or
// the history), ad-hoc statements are decided by the text stage (a few
// with their EXPLAIN in the background to learn) and a tenth are
// explained on the hot path (their text interval straddles a class
// bound).
const DefaultMix = "cache=0.3,history=0.3,text=0.2,text_learn=0.1,explain=0.1"

// DefaultFeatures are every shared feature in Redis.
var DefaultFeatures = []string{FeatureAdmission, FeatureRateLimit, FeatureUsage, FeatureHistory}

// MixPaths are the paths a mix may name.
var MixPaths = []string{PathPassthrough, PathText, PathTextLearn, PathExplain, PathHistory, PathCache}

// ParseMix reads "path=share,..." (shares normalized by the model).
func ParseMix(s string) (map[string]float64, error) {
	m := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		x, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || x < 0 {
			return nil, fmt.Errorf("capacity: mix: %q is not path=share", kv)
		}
		known := false
		for _, p := range MixPaths {
			known = known || p == k
		}
		if !known {
			return nil, fmt.Errorf("capacity: mix: unknown path %q (one of %s)", k, strings.Join(MixPaths, ", "))
		}
		m[k] += x
	}
	return m, nil
}

// Report prints the model's answer for each rate.
func Report(w io.Writer, f Figures, s Scenario, rates []float64) error {
	fmt.Fprintf(w, "Figures: %s, %s (%s)\n", f.Provenance.Date, f.Provenance.Machine, f.Provenance.Command)
	paths := make([]string, 0, len(s.Mix))
	for p := range s.Mix {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var mix []string
	for _, p := range paths {
		mix = append(mix, fmt.Sprintf("%s %.0f%%", p, 100*s.Mix[p]))
	}
	fmt.Fprintf(w, "Mix: %s; features in Redis: %s", strings.Join(mix, ", "), strings.Join(s.Features, ", "))
	if len(s.Redises) > 0 {
		fmt.Fprintf(w, " (Redis instances of their own: %s)", strings.Join(s.Redises, ", "))
	}
	fmt.Fprintln(w)
	for _, r := range rates {
		s.Rate = r
		a, err := f.Model(s)
		if err != nil {
			return err
		}
		sc := a.Scenario
		fmt.Fprintf(w, "\n%s statements/s:\n", fmtRate(r))
		fmt.Fprintf(w, "  proxies: %.1f cores busy -> %d replicas of %g cores at %.0f%%\n", a.CPUCores, a.Replicas, sc.CoresPerReplica, 100*sc.TargetUtil)
		for _, l := range a.Redis {
			fmt.Fprintf(w, "  %s (%s): %s ops/s (%s round trips/s, %s commands/s inside), %s in + %s out; command thread %.0f%%; saturates at %s statements/s%s\n",
				l.Name, strings.Join(l.Features, ", "), fmtRate(l.OpsPerSec), fmtRate(l.RoundTripsPerSec), fmtRate(l.CommandsPerSec),
				fmtBytes(l.BytesInPerSec), fmtBytes(l.BytesOutPerSec), 100*l.Util, fmtRate(l.SaturatesAt),
				map[bool]string{true: " — OVER its planned " + fmt.Sprintf("%.0f%%", 100*sc.RedisTargetUtil), false: ""}[l.Util > sc.RedisTargetUtil])
		}
		fmt.Fprintf(w, "  coordinators: %s EXPLAINs/s, %.0f in flight (%.0f%% of %d×%d slots); slots full at %s statements/s\n",
			fmtRate(a.ExplainsPerSec), a.ExplainsInFlight, 100*a.ExplainUtil, sc.ExplainConcurrency, sc.Clusters, fmtRate(a.ExplainSaturatesAt))
		fmt.Fprintf(w, "  first bottleneck: %s, at %s statements/s\n", a.FirstBottleneck, fmtRate(a.BottleneckAt))
	}
	return nil
}

func fmtRate(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "never"
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtBytes(v float64) string {
	switch {
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB/s", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.0f KiB/s", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B/s", v)
}
