package proxy

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/valyala/fasthttp"
)

// The configured clusters: each one's clients (forwarding, and the
// buffered probe client of the monitor and identity checks) and the
// health the monitor keeps.

type cluster struct {
	name        string
	class       string
	engine      dialect.Engine // configured; Unknown: the monitor detects it (Engine)
	url         string
	base        string // lower-case scheme://host[:port]
	host        string // host[:port] for the Host header
	client      *fasthttp.HostClient
	probeClient *fasthttp.HostClient // buffered, for the monitor and identity checks
	routing.Health
}

// addClusters makes o's clusters, in order (the first is the default),
// and the monitor's targets.
func (s *Server) addClusters(o Options) error {
	classes := map[string]bool{}
	for _, cc := range o.Classes {
		classes[cc.Name] = true
	}
	for _, cc := range o.Clusters {
		if _, dup := s.byName[cc.Name]; dup {
			return fmt.Errorf("proxy: duplicate cluster %s", cc.Name)
		}
		if strings.Contains(cc.Name, protocol.TxSep) {
			return fmt.Errorf("proxy: cluster name %q must not contain %q", cc.Name, protocol.TxSep)
		}
		if cc.Class != "" && !classes[cc.Class] {
			return fmt.Errorf("proxy: cluster %s: unknown cost class %q", cc.Name, cc.Class)
		}
		c, err := s.newCluster(cc, o)
		if err != nil {
			return err
		}
		s.clusters = append(s.clusters, c)
		s.byName[c.name] = c
		name := c.name
		s.monitor.Targets = append(s.monitor.Targets, routing.Target{Name: c.name, Health: &c.Health, Prober: prober{c, o.MonitorUser}, Engine: c.engine,
			Restarted: func(before time.Time) { go s.clusterRestarted(name, before) }})
		if c.engine != dialect.Unknown {
			s.log.Info("cluster engine", "cluster", c.name, "engine", c.engine.String(), "configured", true)
		} else if o.MonitorInterval <= 0 {
			s.log.Warn("cluster engine unknown and the monitor is off: it takes clients of either dialect; set its engine", "cluster", c.name)
		}
	}
	s.monitor.Type, s.monitor.Log = o.MonitorType, o.Logger
	return nil
}

// newCluster makes one cluster's clients.
func (s *Server) newCluster(cc ClusterConfig, o Options) (*cluster, error) {
	u, err := url.Parse(cc.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("proxy: cluster %s: bad URL %q", cc.Name, cc.URL)
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	return &cluster{
		name:   cc.Name,
		class:  cc.Class,
		engine: cc.Engine,
		url:    u.Scheme + "://" + u.Host,
		base:   strings.ToLower(u.Scheme + "://" + u.Host),
		host:   u.Host,
		client: &fasthttp.HostClient{
			Addr:                     addr,
			Name:                     "prestroid",
			IsTLS:                    u.Scheme == "https",
			TLSConfig:                o.UpstreamTLS,
			NoDefaultUserAgentHeader: true,
			DisablePathNormalizing:   true,
			StreamResponseBody:       true,
			ReadTimeout:              o.UpstreamTimeout,
			WriteTimeout:             o.UpstreamTimeout,
			MaxConns:                 o.UpstreamMaxConns,
			MaxConnWaitTimeout:       o.UpstreamTimeout,
			RetryIfErr:               retryIdempotent,
			MaxIdleConnDuration:      30 * time.Second,
			ReadBufferSize:           64 << 10,
		},
		probeClient: &fasthttp.HostClient{
			Addr: addr, Name: "prestroid-monitor", IsTLS: u.Scheme == "https", TLSConfig: o.UpstreamTLS,
			MaxResponseBodySize: o.MonitorMaxBytes, ReadTimeout: routing.ProbeTimeout, WriteTimeout: routing.ProbeTimeout,
			Dial: s.dialProbe,
		},
	}, nil
}

// Engine is the cluster's engine: the configured one, else what the
// monitor detected; Unknown until a check told it.
func (c *cluster) Engine() dialect.Engine {
	if c.engine != dialect.Unknown {
		return c.engine
	}
	return c.Health.Engine()
}

// serves reports whether a client of dialect e may be sent to c: the
// dialects match, or one of the two is not known (a client that sends
// neither dialect's headers, a cluster not yet checked), in which case the
// request goes as it came, translated in no way.
func (c *cluster) serves(e dialect.Engine) bool {
	ce := c.Engine()
	return e == dialect.Unknown || ce == dialect.Unknown || ce == e
}

// retryIdempotent lets fasthttp resend a request whose pooled connection
// turned out closed (its own test: nothing was answered) when resending
// cannot do anything twice: GET, HEAD and, unlike fasthttp's default, a
// DELETE (cancelling a query twice is cancelling it). Never a POST.
func retryIdempotent(req *fasthttp.Request, _ int, _ error) (resetTimeout, retry bool) {
	return false, req.Header.IsGet() || req.Header.IsHead() || req.Header.IsDelete()
}

// prober reads a cluster for the monitor (routing.Prober): a GET on its
// buffered probe client as Options.MonitorUser, under the user header of
// the cluster's engine (both dialects' while it is not known: /v1/info,
// which tells it, needs neither).
type prober struct {
	c    *cluster
	user string
}

func (p prober) Probe(path string, deadline time.Time) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.c.url + path)
	req.Header.SetHost(p.c.host)
	switch e := p.c.Engine(); e {
	case dialect.Unknown:
		req.Header.Set(dialect.Trino.Header("User"), p.user)
		req.Header.Set(dialect.Presto.Header("User"), p.user)
	default:
		req.Header.Set(e.Header("User"), p.user)
	}
	resp.StreamBody = false
	if err := p.c.probeClient.DoDeadline(req, resp, deadline); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// dialProbe is the probe clients' fasthttp.DialFunc: the monitor tracks
// their connections and closes them when it stops.
func (s *Server) dialProbe(addr string) (net.Conn, error) {
	conn, err := fasthttp.DialTimeout(addr, routing.ProbeTimeout)
	if err != nil {
		return nil, err
	}
	return s.monitor.Track(conn)
}
