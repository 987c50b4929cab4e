package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cloudflare/tableflip"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/internal/jwtauth"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
)

func init() {
	register("serve", "run the Trino-protocol proxy", runServe)
}

// serveFlags are the command-line overrides of the config file.
type serveFlags struct {
	configPath       string
	listen           string
	adminListen      string
	adminTokenFile   string
	pidFile          string
	upstream         string
	publicURL        string
	routeSecretFile  string
	forwardedHeaders string
	logLevel         string
	model            string
	ortLib           string
	checkConfig      bool
}

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	fs.StringVar(&f.configPath, "config", os.Getenv("PRESTROID_CONFIG"), "YAML config file (env PRESTROID_CONFIG); flags override it")
	fs.StringVar(&f.listen, "listen", "", "listen address HOST:PORT (default 127.0.0.1:8080)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "HOST:PORT of a separate listener for /metrics, /v1/estimate, /v1/routing (default: on --listen; env PRESTROID_ADMIN_LISTEN)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "file holding the bearer token the admin endpoints require (default: none; env PRESTROID_ADMIN_TOKEN)")
	fs.StringVar(&f.pidFile, "pid-file", "", "write the serving process's PID here (follows SIGUSR2 upgrades; env PRESTROID_PID_FILE)")
	fs.StringVar(&f.upstream, "upstream", "", "Trino coordinator URL(s), comma-separated; replaces the file's clusters (first = default)")
	fs.StringVar(&f.publicURL, "public-url", "", "base URL clients use to reach the proxy (default: from the Host header)")
	fs.StringVar(&f.routeSecretFile, "route-secret-file", "", "file holding the route-token HMAC secret (default: random per process; env PRESTROID_ROUTE_SECRET)")
	fs.StringVar(&f.forwardedHeaders, "forwarded-headers", "", "send X-Forwarded-* upstream: true|false (Trino needs http-server.process-forwarded=true)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error")
	fs.StringVar(&f.model, "model", "", "model bundle directory, reloaded on SIGHUP and file change (default: the embedded bundle; env PRESTROID_MODEL)")
	fs.StringVar(&f.ortLib, "ort-lib", "", "ONNX Runtime library libonnxruntime.so.1 (env PRESTROID_ORT_LIB; default: where `make ort` installs it)")
	fs.BoolVar(&f.checkConfig, "check-config", false, "load and validate the configuration and what it references (TLS files, model bundle, route secret), print a verdict and exit: 0 valid, 1 not; starts nothing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadServeConfig(f)
	if f.checkConfig {
		return checkConfig(checkOut, f.configPath, cfg, err)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 2
	}
	logger := newLogger(cfg.LogLevel)
	logDeprecations(cfg, logger)
	srv, closeFeedback, err := newProxy(cfg, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 1
	}
	// Listeners come from tableflip: after SIGUSR2 a new process started
	// from the same binary path and arguments inherits them (no socket is
	// ever closed, so no connection is refused), and this one drains.
	upg, err := tableflip.New(tableflip.Options{PIDFile: cfg.PIDFile})
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 1
	}
	defer upg.Stop()
	go upgradeOnSIGUSR2(upg, logger)
	ln, err := listen(cfg, upg, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 1
	}
	names := make([]string, len(cfg.Clusters))
	for i, c := range cfg.Clusters {
		names[i] = c.Name + "=" + c.URL
	}
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	logger.Info("prestroid listening", "addr", ln.Addr().String(), "scheme", scheme, "clusters", strings.Join(names, ","))
	errc := make(chan error, 3)
	if cfg.AdminListen != "" {
		aln, err := upg.Listen("tcp", cfg.AdminListen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid serve: admin listener:", err)
			return 1
		}
		logger.Info("admin endpoints listening", "addr", aln.Addr().String(), "token", cfg.AdminToken != "")
		go func() { errc <- srv.ServeAdmin(aln) }()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { errc <- srv.Serve(ln) }()
	if cfg.TLS.RedirectListen != "" {
		rln, err := upg.Listen("tcp", cfg.TLS.RedirectListen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid serve: tls.redirect_listen:", err)
			return 1
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		logger.Info("redirecting HTTP to HTTPS", "addr", rln.Addr().String())
		go func() { errc <- srv.ServeRedirect(rln, port) }()
	}
	defer closeFeedback()
	if err := upg.Ready(); err != nil { // tells a parent to stop accepting and drain
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 1
	}
	select {
	case err := <-errc:
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid serve:", err)
			return 1
		}
	case <-upg.Exit():
		logger.Info("upgraded: the new process serves; draining this one")
		sctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			logger.Warn("shutdown", "error", err)
		}
	case <-ctx.Done():
		logger.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			logger.Warn("shutdown", "error", err)
		}
	}
	return 0
}

// listen opens cfg.Listen through the upgrader (so that a graceful upgrade
// hands it over), wrapped in TLS when tls.cert_file is set: the
// certificate is reloaded on SIGHUP and when its files change.
func listen(cfg *config.Config, upg *tableflip.Upgrader, logger *slog.Logger) (net.Listener, error) {
	ln, err := upg.Listen("tcp", cfg.Listen)
	if err != nil || !cfg.TLS.Enabled() {
		return ln, err
	}
	certs, err := frontdoor.NewCertReloader(cfg.TLS.CertFile, cfg.TLS.KeyFile, logger)
	if err != nil {
		ln.Close()
		return nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			_ = certs.Reload()
		}
	}()
	return tls.NewListener(ln, frontdoor.ServerTLSConfig(certs)), nil
}

// drainTimeout bounds how long a process that was upgraded, or told to
// stop, waits for its open requests (long polls last about a second).
const drainTimeout = 10 * time.Second

// upgradeOnSIGUSR2 starts a new process on each SIGUSR2 (tableflip: same
// binary path, arguments and environment, inheriting the listeners). A new
// process that fails to start or to become ready leaves this one serving.
func upgradeOnSIGUSR2(upg *tableflip.Upgrader, logger *slog.Logger) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	for range sig {
		logger.Info("SIGUSR2: starting a new process to take over the listeners")
		if err := upg.Upgrade(); err != nil {
			logger.Error("upgrade failed; this process keeps serving", "error", err)
		}
	}
}

// loadServeConfig reads the file (if any), then env, then flags, and
// validates the result.
func loadServeConfig(f serveFlags) (*config.Config, error) {
	cfg, err := config.Load(f.configPath)
	if err != nil {
		return nil, err
	}
	if f.listen != "" {
		cfg.Listen = f.listen
	}
	if f.pidFile != "" {
		cfg.PIDFile = f.pidFile
	}
	if f.adminListen != "" {
		cfg.AdminListen = f.adminListen
	}
	if f.adminTokenFile != "" {
		b, err := os.ReadFile(f.adminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
		cfg.AdminToken = strings.TrimSpace(string(b))
	}
	if f.upstream != "" {
		cfg.SetUpstreams(strings.Split(f.upstream, ","))
	}
	if f.publicURL != "" {
		cfg.PublicURL = f.publicURL
	}
	if f.routeSecretFile != "" {
		b, err := os.ReadFile(f.routeSecretFile)
		if err != nil {
			return nil, fmt.Errorf("route secret: %w", err)
		}
		cfg.RouteSecret = strings.TrimSpace(string(b))
	}
	if f.forwardedHeaders != "" {
		switch f.forwardedHeaders {
		case "true":
			cfg.ForwardedHeaders = true
		case "false":
			cfg.ForwardedHeaders = false
		default:
			return nil, fmt.Errorf("%w: --forwarded-headers=%q: want true or false", config.ErrInvalid, f.forwardedHeaders)
		}
	}
	if f.logLevel != "" {
		cfg.LogLevel = f.logLevel
	}
	if f.model != "" {
		cfg.Estimator.Model = f.model
	}
	if f.ortLib != "" {
		cfg.Estimator.ORTLib = f.ortLib
	}
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// newProxy builds the proxy; the returned func flushes the feedback log
// and the estimator's history.
func newProxy(cfg *config.Config, logger *slog.Logger) (*proxy.Server, func(), error) {
	signer, err := protocol.NewSigner([]byte(cfg.RouteSecret))
	if err != nil {
		return nil, nil, err
	}
	if cfg.RouteSecret == "" {
		logger.Warn("no route_secret configured: using a random one; URIs of running queries will not survive a restart and replicas cannot share queries")
	}
	o := proxy.OptionsFrom(cfg)
	o.Signer, o.Logger = signer, logger
	if o.UpstreamTLS, err = frontdoor.UpstreamTLSConfig(cfg.UpstreamTLS.CAFile, cfg.UpstreamTLS.InsecureSkipVerify); err != nil {
		return nil, nil, err
	}
	if cfg.JWKS.URL != "" {
		v, err := jwtauth.New(context.Background(), jwtauth.Options{JWKSURL: cfg.JWKS.URL, Issuer: cfg.JWKS.Issuer,
			Audience: cfg.JWKS.Audience, Claim: cfg.IdentityClaim, RefreshInterval: time.Duration(cfg.JWKS.RefreshInterval), Logger: logger})
		if err != nil {
			return nil, nil, err
		}
		o.TokenVerifier = v
		logger.Info("verifying bearer JWTs locally", "jwks", cfg.JWKS.URL)
	}
	if cfg.UpstreamTLS.InsecureSkipVerify {
		logger.Warn("upstream_tls.insecure_skip_verify is on: cluster certificates are NOT verified (tests only)")
	}
	closeEstimator, err := wireEstimator(cfg, &o, logger)
	if err != nil {
		return nil, nil, err
	}
	closeFeedback := closeEstimator
	if cfg.Feedback.Dir != "" {
		fb := newFeedbackLog(cfg.Feedback, logger)
		closeFeedback = func() { closeEstimator(); fb.Close() } // the estimator hands records on to fb until it closes
		o.FeedbackPlans = true                                  // the log writes each query's plan
		// After the estimator's history (wired above), if any.
		if sinks, ok := o.Feedback.(feedbackSinks); ok {
			o.Feedback = append(sinks, fb)
		} else {
			o.Feedback = fb
		}
		logger.Info("recording completed queries", "dir", cfg.Feedback.Dir)
	}
	srv, err := proxy.New(o)
	return srv, closeFeedback, err
}

// logDeprecations warns once at startup of each deprecated key cfg still
// uses (serve --check-config prints the same).
func logDeprecations(cfg *config.Config, logger *slog.Logger) {
	for _, d := range cfg.Deprecations() {
		logger.Warn("deprecated setting", "key", d.Key, "detail", d.Message)
	}
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	switch level {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
