package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DataSize is an amount of memory in bytes that reads "8GB" style strings
// from YAML, as Trino's io.airlift.units.DataSize does (query.max-memory):
// a number (a fraction allowed) and a unit, B, kB, MB, GB, TB or PB, each
// 1024 times the one before (Trino's meaning: "1GB" is 1073741824 bytes);
// KiB, MiB, GiB, TiB and PiB are the same units; the unit's case does not
// matter. A plain integer is bytes.
type DataSize int64

var dataSizeUnits = map[string]float64{
	"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "pb": 1 << 50,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
}

// ParseDataSize reads s in DataSize's syntax.
func ParseDataSize(s string) (DataSize, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, "b"
	if i >= 0 {
		num, unit = strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := dataSizeUnits[unit]
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || num == "" {
		return 0, fmt.Errorf("config: bad data size %q: want a number and B, kB, MB, GB, TB or PB (e.g. 8GB)", s)
	}
	b := math.Ceil(v * mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("config: bad data size %q: too large", s)
	}
	return DataSize(b), nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *DataSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDataSize(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d DataSize) MarshalYAML() (any, error) { return d.String(), nil }

// String is the size in the largest unit that holds it whole ("8GB",
// "1536MB", "100B"), which ParseDataSize reads back as the same size.
func (d DataSize) String() string {
	units := [...]string{"B", "kB", "MB", "GB", "TB", "PB"}
	v, u := int64(d), 0
	for u < len(units)-1 && v != 0 && v%1024 == 0 {
		v /= 1024
		u++
	}
	return strconv.FormatInt(v, 10) + units[u]
}
