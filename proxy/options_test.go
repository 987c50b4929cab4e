package proxy

import (
	"testing"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/internal/fillzero"
	"github.com/prestroid/prestroid/proxy/admission"
)

// withDefaults is o with every setting it leaves zero taken from a
// configuration that sets nothing (Defaults): what a deployment gets. An
// admission store in Redis gets the redis_* defaults too.
func withDefaults(o Options) Options {
	d := Defaults()
	if o.Admission != nil && o.Admission.Redis != nil {
		var c config.Config
		c.Admission.Redis = "redis://defaults" // o's own URL stays
		c.FillDefaults()
		d.Admission = admission.OptionsFrom(c.Admission)
	}
	fillzero.Fill(&o, d)
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

// A cluster's engine travels from the configuration, any case, and an
// unset one stays Unknown (detected).
func TestOptionsFromEngines(t *testing.T) {
	var c config.Config
	c.FillDefaults()
	c.Clusters = []config.Cluster{{Name: "p", URL: "http://p:1", Engine: "Presto"}, {Name: "t", URL: "http://t:1", Engine: "trino"}, {Name: "x", URL: "http://x:1"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	o := OptionsFrom(&c)
	if o.Clusters[0].Engine != dialect.Presto || o.Clusters[1].Engine != dialect.Trino || o.Clusters[2].Engine != dialect.Unknown {
		t.Errorf("engines %+v", o.Clusters)
	}
}
