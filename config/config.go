// Package config holds Prestroid's configuration: one YAML file, overridden by
// environment variables (PRESTROID_*), overridden by command-line flags.
//
// Every setting has one home here. Every field documents its zero-value
// behaviour; the defaults are named constants in defaults.go, applied by
// FillDefaults and read nowhere else. Validate checks every value once and
// names the offending key and value; code configured from a filled,
// validated Config trusts it and neither defaults nor re-checks it.
// Deprecated keys keep working and are listed by Deprecations
// (deprecated.go). The package imports no other project package.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prestroid/prestroid/internal/dialect"
)

// Config is the whole configuration of the prestroid server.
type Config struct {
	// Listen is the proxy's HOST:PORT. Empty means 127.0.0.1:8080.
	Listen string `yaml:"listen"`

	// AdminListen, when set, is a HOST:PORT of its own for the admin
	// endpoints (GET /metrics, POST /v1/estimate, POST /v1/routing), which
	// the client listener then answers 404. Empty means they are served on
	// Listen.
	AdminListen string `yaml:"admin_listen"`

	// AdminToken, when set, is required on the admin endpoints, as
	// "Authorization: Bearer TOKEN" (e.g. Prometheus' scrape
	// authorization) or "X-Prestroid-Admin-Token: TOKEN" (beside a
	// caller's own Authorization on /v1/estimate); it never reaches a
	// cluster and is never logged. At least 16 bytes. Empty means the
	// admin endpoints are open to whoever reaches their listener.
	AdminToken string `yaml:"admin_token"`

	// PIDFile, when set, is where the serving process writes its PID; after
	// a graceful upgrade (SIGUSR2) it holds the new process's. Empty means
	// none is written.
	PIDFile string `yaml:"pid_file"`

	// PublicURL is the base URL clients use to reach the proxy (scheme, host,
	// port, no path), written into every nextUri/infoUri handed to clients.
	// Empty means the URL is derived per request from its Host header and
	// the listener's scheme, which is right unless a load balancer or TLS
	// terminator sits in front of the proxy.
	PublicURL string `yaml:"public_url"`

	// AllowedHosts are the Host header values (host or host:port) clients
	// may reach the proxy by when PublicURL is empty, besides the address a
	// connection arrived on (and localhost on a loopback listener): URIs
	// handed to clients are built from the Host, so any other Host gets 400
	// rather than nextUris pointing wherever the client said. Empty means
	// only those. Set PublicURL behind a load balancer or TLS terminator.
	AllowedHosts []string `yaml:"allowed_hosts"`

	// Identity is how the identity that admission, budgets, routing rules
	// and metrics key on is established: "header" (X-Trino-User as sent:
	// an unauthenticated claim any client can set) or "verified" (the
	// Basic user or the JWT claim IdentityClaim of the credentials,
	// trusted only once the cluster accepted those credentials, for the
	// query's EXPLAIN or a probe; see README "Security"). Empty means
	// header.
	Identity string `yaml:"identity"`
	// IdentityClaim is the JWT claim that names the user (Trino's
	// http-server.authentication.jwt.principal-field). Empty means "sub".
	IdentityClaim string `yaml:"identity_claim"`
	// CredentialTTL is how long a credential the cluster accepted is
	// remembered (keyed by its SHA-256, never stored) so that statements
	// whose EXPLAIN the estimate cascade skips need no probe. Zero means
	// 1m; a password changed on the cluster stops counting as verified
	// after at most this long (Trino itself rejects it at once).
	CredentialTTL Duration `yaml:"credential_ttl"`
	// JWKS optionally verifies Bearer JWTs locally (jwks.go); a token it
	// refuses is still offered to the cluster.
	JWKS JWKS `yaml:"jwks"`

	// TLS makes Listen serve HTTPS (tls.go); UpstreamTLS is how https
	// clusters are verified.
	TLS         TLS         `yaml:"tls"`
	UpstreamTLS UpstreamTLS `yaml:"upstream_tls"`

	// Clusters are the Trino coordinators the proxy may forward to. The proxy
	// never forwards to a host that is not listed here. At least one is
	// required; the first is the default cluster.
	Clusters []Cluster `yaml:"clusters"`

	// RouteSecret signs the route tokens embedded in URIs handed to clients
	// (HMAC-SHA256). All replicas behind one load balancer must share it.
	// Empty means a random per-process secret: fine for one replica, but
	// then a restart invalidates the URIs of running queries. At least 32
	// bytes when set.
	RouteSecret string `yaml:"route_secret"`

	// ForwardedHeaders sends X-Forwarded-For/-Proto/-Host upstream. Trino
	// 451+ answers 406 to any X-Forwarded-* header unless it runs with
	// http-server.process-forwarded=true, so the default (false) strips them.
	ForwardedHeaders bool `yaml:"forwarded_headers"`

	// MaxRequestBodyBytes bounds a client request body (the SQL text).
	// Zero means 16 MiB.
	MaxRequestBodyBytes int `yaml:"max_request_body_bytes"`

	// MaxHeaderBytes bounds the request header block; prepared statements
	// travel in headers, so keep it at least as large as Trino's (8 KiB by
	// default, often raised). Zero means 64 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes"`

	// UpstreamTimeout bounds one upstream exchange (Trino long-polls for up
	// to 1 s per request, so this only matters for dead clusters). Zero
	// means 60s.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`

	// UpstreamMaxConns bounds the open connections to each cluster. A
	// request past it waits up to upstream_timeout for a free connection,
	// then gets 503 (nothing was sent, the client retries); the cluster is
	// not marked down for it. Zero means 1024.
	UpstreamMaxConns int `yaml:"upstream_max_conns"`

	// PageBufferBytes is how much of each result page the proxy reads
	// before sending it: an upstream that fails or stalls within a page
	// is then answered with a well-formed Trino error, not truncated JSON.
	// Larger pages stream on (bounded memory) and are truncated by such a
	// failure. Zero means 4 MiB (Trino's pages are ~1 MB by default).
	PageBufferBytes int `yaml:"page_buffer_bytes"`

	// GzipLevel compresses result pages for clients that send
	// Accept-Encoding: gzip (1 fastest … 9 smallest). Zero means 2;
	// negative sends them uncompressed.
	GzipLevel int `yaml:"gzip_level"`

	// PageReadAheadBytes bounds the result pages the proxy holds read
	// ahead, all queries together: once a client has a page of rows, the
	// proxy fetches the query's next page from Trino while the client
	// reads this one, so that it is ready when asked for (one page per
	// query, dropped when the query is cancelled or the page is not asked
	// for within a minute; Trino answers a repeated poll from its own
	// copy, so a dropped page costs nothing but the fetch). Zero means
	// 256 MiB; negative turns reading ahead off.
	PageReadAheadBytes int `yaml:"page_read_ahead_bytes"`

	// QueryMapSize bounds the in-memory map from query id to cluster used
	// for client-built paths (/v1/query/{id}). Zero means 100000 entries;
	// beyond it the oldest entries are forgotten and the proxy asks each
	// cluster instead.
	QueryMapSize int `yaml:"query_map_size"`

	// LogLevel is one of debug, info, warn, error. Empty means info.
	LogLevel string `yaml:"log_level"`

	// Routing: cost classes, fallback, shadow mode, estimate budget
	// (routing.go).
	Routing Routing `yaml:"routing"`
	// Admission: in-flight budgets and the proxy's queue (routing.go).
	Admission Admission `yaml:"admission"`
	// Feedback: the log of completed queries for retraining (routing.go).
	Feedback Feedback `yaml:"feedback"`
	// Console: the web console on the admin surface (console.go).
	Console Console `yaml:"console"`
	// Guardrails refuse queries whose estimate is over a limit before
	// they reach a cluster (guardrails.go). Empty means none.
	Guardrails []Guardrail `yaml:"guardrails"`
	// Usage: cost accounting per user, group and source (usage.go).
	Usage Usage `yaml:"usage"`

	// Estimator configures the cost model (estimator.go); the zero value
	// serves the embedded default model, if the binary has one.
	Estimator Estimator `yaml:"estimator"`
}

// Cluster is one coordinator: Trino or PrestoDB.
type Cluster struct {
	// Name identifies the cluster in route tokens, headers, logs and
	// metrics. Required, unique, [A-Za-z0-9_.-] only.
	Name string `yaml:"name"`
	// URL is the coordinator's base URL, e.g. http://trino-small:8080.
	// Required; http or https, no path.
	URL string `yaml:"url"`
	// Class is the cost class (routing.classes[].name) the cluster serves.
	// Empty: the cluster only serves as the default or a fallback.
	Class string `yaml:"class"`
	// Engine is the coordinator's engine: "trino" or "presto" (PrestoDB),
	// any case. It decides which clients the cluster serves (a client of
	// the other dialect is never sent to it) and the names of the headers
	// the proxy adds. Empty: detected from the coordinator's /v1/info at
	// each health check (the monitor); until a check has told it, the
	// cluster takes a client of either dialect as it comes. Set it when
	// the monitor is off (routing.monitor_interval: 0) or the cluster's
	// /v1/info is not reachable from the proxy.
	Engine string `yaml:"engine"`
}

// Duration is a time.Duration that reads "1.5s" style strings from YAML.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("config: bad duration %q: %w", n.Value, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String formats the duration like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("config: invalid")

// Load reads the YAML file at path (empty path: no file), then applies
// environment overrides (see ApplyEnv). It neither fills defaults nor
// validates: apply flags, then call FillDefaults (defaults.go) and
// Validate, then report Deprecations.
func Load(path string) (*Config, error) {
	c := &Config{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	if err := c.ApplyEnv(os.LookupEnv); err != nil {
		return nil, err
	}
	return c, nil
}

// ApplyEnv overrides fields from environment variables:
//
//	PRESTROID_LISTEN, PRESTROID_ADMIN_LISTEN, PRESTROID_ADMIN_TOKEN, PRESTROID_PID_FILE,
//	PRESTROID_PUBLIC_URL, PRESTROID_ROUTE_SECRET,
//	PRESTROID_UPSTREAM (comma-separated URLs; replaces clusters, named
//	default, cluster2, ...), PRESTROID_FORWARDED_HEADERS (true/false),
//	PRESTROID_LOG_LEVEL, PRESTROID_MODEL (estimator.model), PRESTROID_ORT_LIB
//	(estimator.ort_lib), PRESTROID_TLS_CERT_FILE, PRESTROID_TLS_KEY_FILE,
//	PRESTROID_UPSTREAM_CA_FILE (upstream_tls.ca_file), PRESTROID_IDENTITY,
//	PRESTROID_ADMISSION_REDIS (admission.redis), PRESTROID_HISTORY_REDIS
//	(estimator.history.redis), PRESTROID_EXPLAIN (estimator.explain),
//	PRESTROID_ALLOWED_HOSTS (comma-separated), PRESTROID_USAGE_REDIS
//	(usage.redis).
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup("PRESTROID_LISTEN"); ok {
		c.Listen = v
	}
	if v, ok := lookup("PRESTROID_PID_FILE"); ok {
		c.PIDFile = v
	}
	if v, ok := lookup("PRESTROID_ADMIN_LISTEN"); ok {
		c.AdminListen = v
	}
	if v, ok := lookup("PRESTROID_ADMIN_TOKEN"); ok {
		c.AdminToken = v
	}
	if v, ok := lookup("PRESTROID_PUBLIC_URL"); ok {
		c.PublicURL = v
	}
	if v, ok := lookup("PRESTROID_ROUTE_SECRET"); ok {
		c.RouteSecret = v
	}
	if v, ok := lookup("PRESTROID_UPSTREAM"); ok && v != "" {
		c.SetUpstreams(strings.Split(v, ","))
	}
	if v, ok := lookup("PRESTROID_FORWARDED_HEADERS"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%w: PRESTROID_FORWARDED_HEADERS=%q is not a boolean", ErrInvalid, v)
		}
		c.ForwardedHeaders = b
	}
	if v, ok := lookup("PRESTROID_LOG_LEVEL"); ok {
		c.LogLevel = v
	}
	if v, ok := lookup("PRESTROID_ALLOWED_HOSTS"); ok {
		c.AllowedHosts = nil
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				c.AllowedHosts = append(c.AllowedHosts, h)
			}
		}
	}
	if v, ok := lookup("PRESTROID_IDENTITY"); ok {
		c.Identity = v
	}
	c.applyTLSEnv(lookup)
	c.Estimator.applyEnv(lookup)
	c.Admission.applyEnv(lookup)
	c.Usage.applyEnv(lookup)
	return nil
}

// SetUpstreams replaces the cluster list with the given URLs, named
// "default", "cluster2", "cluster3", ... (used by --upstream and
// PRESTROID_UPSTREAM).
func (c *Config) SetUpstreams(urls []string) {
	c.Clusters = c.Clusters[:0]
	for i, u := range urls {
		name := "default"
		if i > 0 {
			name = "cluster" + strconv.Itoa(i+1)
		}
		c.Clusters = append(c.Clusters, Cluster{Name: name, URL: strings.TrimSpace(u)})
	}
}

// Validate checks every field and names the first bad key and value.
func (c *Config) Validate() error {
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrInvalid, key, val, why)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen", strconv.Quote(c.Listen), "want HOST:PORT")
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			return bad("admin_listen", strconv.Quote(c.AdminListen), "want HOST:PORT")
		}
		if c.AdminListen == c.Listen {
			return bad("admin_listen", strconv.Quote(c.AdminListen), "must differ from listen")
		}
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		return bad("admin_token", "(redacted, "+strconv.Itoa(len(c.AdminToken))+" bytes)", "want at least 16 bytes")
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return bad("public_url", strconv.Quote(c.PublicURL), "want http(s)://host[:port] with no path")
		}
	}
	if len(c.Clusters) == 0 {
		return bad("clusters", "[]", "at least one cluster is required (--upstream URL or clusters: in the file)")
	}
	seen := map[string]bool{}
	for i, cl := range c.Clusters {
		key := fmt.Sprintf("clusters[%d]", i)
		if cl.Name == "" || strings.Trim(cl.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
			return bad(key+".name", strconv.Quote(cl.Name), "want a non-empty name of letters, digits, _ . -")
		}
		if seen[cl.Name] {
			return bad(key+".name", strconv.Quote(cl.Name), "duplicate cluster name")
		}
		seen[cl.Name] = true
		u, err := url.Parse(cl.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return bad(key+".url", strconv.Quote(cl.URL), "want http(s)://host:port with no path or query")
		}
		if _, err := dialect.Parse(cl.Engine); err != nil {
			return bad(key+".engine", strconv.Quote(cl.Engine), "want trino or presto, or empty to detect it")
		}
	}
	if c.RouteSecret != "" && len(c.RouteSecret) < 32 {
		return bad("route_secret", "(redacted, "+strconv.Itoa(len(c.RouteSecret))+" bytes)", "want at least 32 bytes")
	}
	if c.MaxRequestBodyBytes < 0 {
		return bad("max_request_body_bytes", c.MaxRequestBodyBytes, "must not be negative")
	}
	if c.MaxHeaderBytes < 0 {
		return bad("max_header_bytes", c.MaxHeaderBytes, "must not be negative")
	}
	if c.UpstreamTimeout < 0 {
		return bad("upstream_timeout", time.Duration(c.UpstreamTimeout), "must not be negative")
	}
	if c.UpstreamMaxConns < 0 {
		return bad("upstream_max_conns", c.UpstreamMaxConns, "must not be negative")
	}
	if c.PageBufferBytes < 0 {
		return bad("page_buffer_bytes", c.PageBufferBytes, "must not be negative")
	}
	if c.PageReadAheadBytes > 0 && c.PageReadAheadBytes < c.PageBufferBytes {
		return bad("page_read_ahead_bytes", c.PageReadAheadBytes, "must be at least page_buffer_bytes (one page), or negative for off")
	}
	if c.GzipLevel > 9 {
		return bad("gzip_level", c.GzipLevel, "want 1 (fastest) to 9 (smallest), or negative for none")
	}
	if c.QueryMapSize < 0 {
		return bad("query_map_size", c.QueryMapSize, "must not be negative")
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return bad("log_level", strconv.Quote(c.LogLevel), "want debug, info, warn or error")
	}
	switch c.Identity {
	case "", "header", "verified":
	default:
		return bad("identity", strconv.Quote(c.Identity), "want header or verified")
	}
	if c.CredentialTTL < 0 {
		return bad("credential_ttl", time.Duration(c.CredentialTTL), "must not be negative")
	}
	if err := c.validateJWKS(); err != nil {
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := c.validateExplain(); err != nil {
		return err
	}
	if err := c.validateEstimator(); err != nil {
		return err
	}
	if err := c.validateConsole(); err != nil {
		return err
	}
	if err := c.validateGuardrails(); err != nil {
		return err
	}
	if err := c.validateUsage(); err != nil {
		return err
	}
	return c.validateRouting()
}
