package main

import (
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
)

// prestroid serve --check-config: load and validate the configuration the
// way serve would (file, environment, flags), then check what it refers to
// that can be checked without serving: the TLS pair and the upstream CA
// parse, the route secret is there when replicas must share it, the model
// bundle (and ONNX Runtime) load, the history file's directory exists;
// deprecated keys the configuration still uses are warnings.
// Prints one line per check and a verdict; starts no listener, monitor or
// watcher, contacts no cluster, Redis or JWKS, writes no file.

// checkOut is where serve --check-config prints (tests swap it).
var checkOut io.Writer = os.Stdout

// checkResult is one line of the report.
type checkResult struct {
	level  string // "ok", "warn" or "FAIL"
	key    string
	detail string
}

// checkConfig writes the report for cfg (or for the error that loading it
// gave) to w and returns the exit status: 0 valid, 1 not.
func checkConfig(w io.Writer, source string, cfg *config.Config, loadErr error) int {
	if source == "" {
		source = "(no file: defaults, environment and flags)"
	}
	fmt.Fprintf(w, "prestroid serve --check-config: %s\n", source)
	var rs []checkResult
	if loadErr != nil {
		rs = append(rs, checkResult{"FAIL", "load", loadErr.Error()})
	} else {
		rs = checkLoaded(cfg)
	}
	fails, warns := 0, 0
	for _, r := range rs {
		fmt.Fprintf(w, "  %-4s  %s: %s\n", r.level, r.key, r.detail)
		switch r.level {
		case "FAIL":
			fails++
		case "warn":
			warns++
		}
	}
	if fails > 0 {
		fmt.Fprintf(w, "config INVALID: %d error(s), %d warning(s)\n", fails, warns)
		return 1
	}
	fmt.Fprintf(w, "config OK: %d warning(s)\n", warns)
	return 0
}

// checkLoaded checks a configuration that loaded and validated.
func checkLoaded(cfg *config.Config) []checkResult {
	var rs []checkResult
	ok := func(key, f string, a ...any) { rs = append(rs, checkResult{"ok", key, fmt.Sprintf(f, a...)}) }
	warn := func(key, f string, a ...any) { rs = append(rs, checkResult{"warn", key, fmt.Sprintf(f, a...)}) }
	fail := func(key, f string, a ...any) { rs = append(rs, checkResult{"FAIL", key, fmt.Sprintf(f, a...)}) }

	names := make([]string, len(cfg.Clusters))
	for i, c := range cfg.Clusters {
		names[i] = c.Name + "=" + c.URL
	}
	ok("config", "valid; listen %s, clusters %s", cfg.Listen, strings.Join(names, ","))
	for _, d := range cfg.Deprecations() {
		warn(d.Key, "%s", d.Message) // serve logs the same at startup
	}
	if cfg.AdminListen != "" {
		ok("admin_listen", "%s (admin token: %v); /healthz and /readyz on both listeners", cfg.AdminListen, cfg.AdminToken != "")
	} else if cfg.AdminToken == "" {
		warn("admin_listen", "none and no admin_token: /metrics, /v1/estimate and /v1/routing are open on the client listener")
	}

	// Replicas verify each other's route tokens: they need one secret.
	shared := cfg.Admission.Redis != "" || cfg.Admission.Replicas > 1
	switch {
	case cfg.RouteSecret == "" && shared:
		fail("route_secret", "missing: replicas (admission.redis or admission.replicas > 1) must share one, or a query's URIs fail on every replica but the one that placed it")
	case cfg.RouteSecret == "":
		warn("route_secret", "none: a random one per process (URIs of running queries do not survive a restart; one replica only)")
	default:
		if _, err := protocol.NewSigner([]byte(cfg.RouteSecret)); err != nil {
			fail("route_secret", "%v", err)
		} else {
			ok("route_secret", "set (%d bytes)", len(cfg.RouteSecret))
		}
	}
	if cfg.Admission.Redis != "" {
		ok("admission.redis", "set (not contacted; never printed); prefix %q", cfg.Admission.RedisPrefix)
	}
	switch u := cfg.Usage; {
	case u.Disabled:
		ok("usage", "off")
	case u.Redis != "":
		ok("usage", "shared through Redis (not contacted; never printed), prefix %q; %s buckets kept %s", u.RedisPrefix, u.Bucket, u.Retention)
	case cfg.Admission.Replicas > 1:
		warn("usage", "in each replica's memory: /prestroid/api/usage answers for one replica of %d (set usage.redis)", cfg.Admission.Replicas)
	default:
		ok("usage", "in this process's memory; %s buckets kept %s", u.Bucket, u.Retention)
	}

	if cfg.TLS.Enabled() {
		if r, err := frontdoor.NewCertReloader(cfg.TLS.CertFile, cfg.TLS.KeyFile, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			fail("tls", "%v", err)
		} else if leaf := certLeaf(r); leaf != nil && time.Now().After(leaf.NotAfter) {
			fail("tls", "%s expired on %s", cfg.TLS.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
		} else if leaf != nil {
			ok("tls", "%s: %s, valid until %s", cfg.TLS.CertFile, leaf.Subject.String(), leaf.NotAfter.UTC().Format(time.RFC3339))
		} else {
			ok("tls", "%s parses", cfg.TLS.CertFile)
		}
	}
	if cfg.UpstreamTLS.CAFile != "" || cfg.UpstreamTLS.InsecureSkipVerify {
		if _, err := frontdoor.UpstreamTLSConfig(cfg.UpstreamTLS.CAFile, cfg.UpstreamTLS.InsecureSkipVerify); err != nil {
			fail("upstream_tls", "%v", err)
		} else if cfg.UpstreamTLS.InsecureSkipVerify {
			warn("upstream_tls", "insecure_skip_verify: cluster certificates are NOT verified (tests only)")
		} else {
			ok("upstream_tls", "%s parses", cfg.UpstreamTLS.CAFile)
		}
	}
	if cfg.JWKS.URL != "" {
		ok("jwks", "%s (not fetched)", cfg.JWKS.URL)
	}
	rs = append(rs, checkEstimator(cfg.Estimator)...)
	if cfg.Feedback.Dir != "" {
		if st, err := os.Stat(cfg.Feedback.Dir); err == nil && !st.IsDir() {
			fail("feedback.dir", "%s is not a directory", cfg.Feedback.Dir)
		} else {
			ok("feedback.dir", "%s", cfg.Feedback.Dir)
		}
	}
	return rs
}

// checkEstimator loads the model as serve would (ONNX Runtime, then the
// configured or embedded bundle with its golden cases) and closes it.
func checkEstimator(e config.Estimator) []checkResult {
	if e.Disabled {
		return []checkResult{{"ok", "estimator", "disabled: queries are not estimated"}}
	}
	var rs []checkResult
	src := "embedded bundle"
	if e.Model != "" {
		src = e.Model
	}
	rt, err := newRuntime(e)
	var m *bundle.Model
	if err == nil {
		m, err = loadModel(e, rt, bundle.ModelOptions{})
	}
	switch {
	case err != nil && (e.Model != "" || e.History.Disabled):
		rs = append(rs, checkResult{"FAIL", "estimator.model", fmt.Sprintf("%s: %v", src, err)})
	case err != nil:
		rs = append(rs, checkResult{"warn", "estimator.model", fmt.Sprintf("%s does not load (%v): serve runs without a model (cheap statements, history, the optimizer once calibrated)", src, err)})
	default:
		detail := fmt.Sprintf("%s loads: %s", src, m.ID())
		level := "ok"
		if m.Manifest().Untrained() {
			level, detail = "warn", detail+" is UNTRAINED (random weights)"
		}
		rs = append(rs, checkResult{level, "estimator.model", detail})
		m.Close()
	}
	if p := e.History.Path; p != "" && !e.History.Disabled {
		if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
			rs = append(rs, checkResult{"FAIL", "estimator.history.path", fmt.Sprintf("%s: its directory does not exist", p)})
		} else {
			rs = append(rs, checkResult{"ok", "estimator.history.path", p + " (not opened: a serving process may hold it)"})
		}
	}
	return rs
}

// certLeaf is the parsed leaf certificate the reloader serves, if any.
func certLeaf(r *frontdoor.CertReloader) *x509.Certificate {
	c, err := r.GetCertificate(nil)
	if err != nil || c == nil {
		return nil
	}
	return c.Leaf
}
