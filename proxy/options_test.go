package proxy

import (
	"testing"

	"github.com/prestroid/prestroid/internal/fillzero"
)

// withDefaults is o with every setting it leaves zero taken from a
// configuration that sets nothing (Defaults): what a deployment gets.
func withDefaults(o Options) Options {
	fillzero.Fill(&o, Defaults())
	return o
}

// The defaults come from config alone: a configuration that sets nothing
// gives the proxy its documented settings.
func TestDefaultsComeFromConfig(t *testing.T) {
	d := Defaults()
	if d.UpstreamTimeout <= 0 || d.GzipLevel <= 0 || d.MonitorInterval <= 0 || d.ConsoleDecisions <= 0 ||
		d.ClassQuantile <= 0 || d.Identity == "" || d.Admission == nil || d.Admission.QueueSize <= 0 || d.Admission.IdleRelease <= 0 {
		t.Errorf("Defaults() left a setting unfilled: %+v, admission %+v", d, d.Admission)
	}
}
