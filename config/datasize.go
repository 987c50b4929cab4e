package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DataSize is a number of bytes that reads Trino's data size syntax from
// YAML: a number and a unit, "512MB", "4GB", "1.5TB", as in
// query.max-memory. The units are io.airlift.units.DataSize's (B, kB, MB,
// GB, TB, PB), each 1024 times the one before, as Trino reads them;
// "KB" and the IEC names (KiB, MiB, GiB, TiB, PiB) mean the same, the
// unit's case does not matter, and a bare number is bytes. The zero value
// is no size (a bound then is unset).
type DataSize float64

// dataSizeUnits are the multipliers of the units ParseDataSize reads.
var dataSizeUnits = map[string]float64{
	"": 1, "B": 1,
	"kB": 1 << 10, "KB": 1 << 10, "KiB": 1 << 10,
	"MB": 1 << 20, "MiB": 1 << 20,
	"GB": 1 << 30, "GiB": 1 << 30,
	"TB": 1 << 40, "TiB": 1 << 40,
	"PB": 1 << 50, "PiB": 1 << 50,
}

// ParseDataSize reads s in the DataSize syntax; a negative, NaN or
// infinite size is an error.
func ParseDataSize(s string) (DataSize, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.TrimSpace(t[i:])
	mul, ok := dataSizeUnits[unit]
	for u, m := range dataSizeUnits {
		if !ok && strings.EqualFold(u, unit) {
			mul, ok = m, true
		}
	}
	if !ok {
		return 0, fmt.Errorf("config: bad data size %q: unknown unit %q (want B, kB, MB, GB, TB or PB)", s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("config: bad data size %q: want a number and a unit, e.g. 4GB", s)
	}
	return DataSize(v * mul), nil
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

// String formats the size in the largest unit that holds it whole (Trino's
// syntax: "4GB", "1536MB"); a size that no unit holds whole is bytes.
func (d DataSize) String() string {
	v := float64(d)
	for _, u := range [...]string{"PB", "TB", "GB", "MB", "kB"} {
		if m := dataSizeUnits[u]; v >= m && v == math.Trunc(v/m)*m {
			return strconv.FormatFloat(v/m, 'f', -1, 64) + u
		}
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + "B"
}

// Bytes is the size in bytes.
func (d DataSize) Bytes() float64 { return float64(d) }
