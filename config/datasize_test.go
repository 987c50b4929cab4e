package config

import (
	"strings"
	"testing"

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
