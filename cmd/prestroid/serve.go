package main

import (
	"context"
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

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/proxy"
)

func init() {
	register("serve", "run the Trino-protocol proxy", runServe)
}

// serveFlags are the command-line overrides of the config file.
type serveFlags struct {
	configPath       string
	listen           string
	upstream         string
	publicURL        string
	routeSecretFile  string
	forwardedHeaders string
	logLevel         string
	model            string
	ortLib           string
}

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	fs.StringVar(&f.configPath, "config", os.Getenv("PRESTROID_CONFIG"), "YAML config file (env PRESTROID_CONFIG); flags override it")
	fs.StringVar(&f.listen, "listen", "", "listen address HOST:PORT (default 127.0.0.1:8080)")
	fs.StringVar(&f.upstream, "upstream", "", "Trino coordinator URL(s), comma-separated; replaces the file's clusters (first = default)")
	fs.StringVar(&f.publicURL, "public-url", "", "base URL clients use to reach the proxy (default: from the Host header)")
	fs.StringVar(&f.routeSecretFile, "route-secret-file", "", "file holding the route-token HMAC secret (default: random per process; env PRESTROID_ROUTE_SECRET)")
	fs.StringVar(&f.forwardedHeaders, "forwarded-headers", "", "send X-Forwarded-* upstream: true|false (Trino needs http-server.process-forwarded=true)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error")
	fs.StringVar(&f.model, "model", "", "model bundle directory, reloaded on SIGHUP and file change (default: the embedded bundle; env PRESTROID_MODEL)")
	fs.StringVar(&f.ortLib, "ort-lib", "", "ONNX Runtime library libonnxruntime.so.1 (env PRESTROID_ORT_LIB; default: where `make ort` installs it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadServeConfig(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 2
	}
	logger := newLogger(cfg.LogLevel)
	srv, closeFeedback, err := newProxy(cfg, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 1
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid serve:", err)
		return 1
	}
	names := make([]string, len(cfg.Clusters))
	for i, c := range cfg.Clusters {
		names[i] = c.Name + "=" + c.URL
	}
	logger.Info("prestroid listening", "addr", ln.Addr().String(), "clusters", strings.Join(names, ","))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer closeFeedback()
	select {
	case err := <-errc:
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid serve:", err)
			return 1
		}
	case <-ctx.Done():
		logger.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			logger.Warn("shutdown", "error", err)
		}
	}
	return 0
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
	signer, err := proxy.NewSigner([]byte(cfg.RouteSecret))
	if err != nil {
		return nil, nil, err
	}
	if cfg.RouteSecret == "" {
		logger.Warn("no route_secret configured: using a random one; URIs of running queries will not survive a restart and replicas cannot share queries")
	}
	o := proxyOptions(cfg, signer, logger)
	closeEstimator, err := wireEstimator(cfg, &o, logger)
	if err != nil {
		return nil, nil, err
	}
	closeFeedback := closeEstimator
	if cfg.Feedback.Dir != "" {
		fb := newFeedbackLog(cfg.Feedback, logger)
		closeFeedback = func() { fb.Close(); closeEstimator() }
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

// proxyOptions maps the configuration onto the proxy's options; the
// estimator is wired separately.
func proxyOptions(cfg *config.Config, signer *proxy.Signer, logger *slog.Logger) proxy.Options {
	clusters := make([]proxy.ClusterConfig, len(cfg.Clusters))
	for i, c := range cfg.Clusters {
		clusters[i] = proxy.ClusterConfig{Name: c.Name, URL: c.URL, Class: c.Class}
	}
	classes := make([]proxy.CostClass, len(cfg.Routing.Classes))
	for i, c := range cfg.Routing.Classes {
		classes[i] = proxy.CostClass{Name: c.Name, MaxCPUSeconds: c.MaxCPUSeconds}
	}
	r, a := cfg.Routing, cfg.Admission
	rules := make([]proxy.RoutingRule, len(r.Rules))
	for i, ru := range r.Rules {
		rules[i] = proxy.RoutingRule{Name: ru.Name, User: ru.User, Group: ru.Group, Source: ru.Source, ClientTags: ru.ClientTags, Class: ru.Class}
	}
	return proxy.Options{
		Clusters:            clusters,
		Signer:              signer,
		PublicURL:           cfg.PublicURL,
		ForwardedHeaders:    cfg.ForwardedHeaders,
		UpstreamTimeout:     time.Duration(cfg.UpstreamTimeout),
		QueryMapSize:        cfg.QueryMapSize,
		MaxRequestBodyBytes: cfg.MaxRequestBodyBytes,
		MaxHeaderBytes:      cfg.MaxHeaderBytes,
		Logger:              logger,
		Classes:             classes,
		Fallback:            r.Fallback,
		Rules:               rules,
		Shadow:              r.Shadow,
		EstimateTimeout:     time.Duration(r.EstimateTimeout),
		KeepClientEstimate:  r.KeepClientEstimate,
		ClassTag:            r.ClassTag,
		ClassQuantile:       r.ClassQuantile,
		Planners:            r.Planners,
		MonitorInterval:     time.Duration(r.MonitorInterval),
		MonitorUser:         r.MonitorUser,
		Admission: &proxy.AdmissionOptions{
			MaxQueries: a.MaxQueries, MaxCPUSeconds: a.MaxCPUSeconds,
			UserMaxQueries: a.UserMaxQueries, UserMaxCPUSeconds: a.UserMaxCPUSeconds,
			GroupMaxQueries: a.GroupMaxQueries, GroupMaxCPUSeconds: a.GroupMaxCPUSeconds,
			UserGroups: a.UserGroups, GroupHeader: a.GroupHeader,
			QueueSize: a.QueueSize, MaxWait: time.Duration(a.MaxWait),
		},
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
