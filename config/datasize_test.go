package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestParseDataSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{
		{"0", 0}, {"1024", 1024}, {"512B", 512}, {"1kB", 1024}, {"1KB", 1024}, {"2KiB", 2048},
		{"4MB", 4 << 20}, {"1.5GB", 1.5 * (1 << 30)}, {"4GB", 4 << 30}, {"4 GB", 4 << 30}, {"3GiB", 3 << 30},
		{"2TB", 2 << 40}, {"1PB", 1 << 50},
	} {
		got, err := ParseDataSize(c.in)
		if err != nil || float64(got) != c.want {
			t.Errorf("ParseDataSize(%q) = %v, %v; want %v", c.in, float64(got), err, c.want)
		}
	}
	for _, bad := range []string{"", "GB", "4XB", "-1GB", "4 G B", "1e400GB", "NaN"} {
		if _, err := ParseDataSize(bad); err == nil || !strings.Contains(err.Error(), "data size") {
			t.Errorf("ParseDataSize(%q): %v, want an error naming a data size", bad, err)
		}
	}
}

func TestDataSizeYAMLRoundTrip(t *testing.T) {
	var v struct {
		M DataSize `yaml:"m"`
	}
	if err := yaml.Unmarshal([]byte("m: 1536MB"), &v); err != nil || v.M.Bytes() != 1536<<20 {
		t.Fatalf("%v %v", v.M, err)
	}
	out, err := yaml.Marshal(v)
	if err != nil || strings.TrimSpace(string(out)) != "m: 1536MB" {
		t.Errorf("%q %v", out, err)
	}
	for in, want := range map[DataSize]string{4 << 30: "4GB", 1: "1B", 1000: "1000B", 1 << 10: "1kB", 0: "0B"} {
		if in.String() != want {
			t.Errorf("%v.String() = %q, want %q", float64(in), in.String(), want)
		}
	}
	if err := yaml.Unmarshal([]byte("m: lots"), &v); err == nil {
		t.Error("m: lots parsed")
	}
}

// The memory and time keys of classes and admission, as an operator
// writes them.
func TestLoadMemoryAndTimeKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "prestroid.yaml")
	os.WriteFile(p, []byte(`route_secret: "0123456789012345678901234567890123456789"
clusters:
  - {name: s, url: "http://s:1", class: small}
  - {name: l, url: "http://l:1", class: large}
routing:
  classes:
    - {name: small, max_cpu_seconds: 30, max_peak_memory: 4GB, max_elapsed: 2m}
    - {name: large, max_peak_memory: 48GB}
admission:
  max_peak_memory: 64GB
  user_max_peak_memory: 1.5GB
  class_max_peak_memory: {large: 200GB}
`), 0o600)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	c.FillDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cl := c.Routing.Classes
	if cl[0].MaxPeakMemory != 4<<30 || time.Duration(cl[0].MaxElapsed) != 2*time.Minute || cl[1].MaxPeakMemory != 48<<30 || cl[1].MaxElapsed != 0 {
		t.Errorf("classes %+v", cl)
	}
	a := c.Admission
	if a.MaxPeakMemory != 64<<30 || a.UserMaxPeakMemory != 1.5*(1<<30) || a.ClassMaxPeakMemory["large"] != 200<<30 {
		t.Errorf("admission %+v", a)
	}
	os.WriteFile(p, []byte("routing:\n  classes:\n    - {name: a, max_peak_memory: 4 gigs}\n"), 0o600)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "data size") {
		t.Errorf("a bad data size loaded: %v", err)
	}
}
