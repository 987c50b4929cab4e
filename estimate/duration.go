package estimate

import (
	"math"
	"strconv"
)

// TrinoDuration formats seconds in Trino's duration syntax (io.airlift.units
// Duration: a number and one of ns us ms s m h d), never Go's "1h30m0s".
func TrinoDuration(sec float64) string {
	if math.IsNaN(sec) || sec < 0 {
		sec = 0
	}
	switch {
	case sec < 1:
		return strconv.FormatFloat(math.Ceil(sec*1000), 'f', 0, 64) + "ms"
	case sec < 600:
		return strconv.FormatFloat(math.Ceil(sec), 'f', 0, 64) + "s"
	default:
		return strconv.FormatFloat(math.Ceil(sec/60), 'f', 0, 64) + "m"
	}
}
