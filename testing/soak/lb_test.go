package soak

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// balancer stands in for the load balancer in front of the replicas, doing
// what a plain one (nginx, an L7 cloud balancer, Envoy with
// retry_on: connect-failure) does and no more: round robin over the
// backends its health check passes (GET /healthz every 500 ms), a request
// whose connection could not be opened tried on the next backend (nothing
// was sent, so any method may move), and any other failure answered 502.
// It never retries a request that reached a replica: the clients decide
// that (each retries 502/503 as its protocol allows). The replicas set
// public_url to the balancer, so every nextUri a client follows comes back
// here and may land on either replica (the route token is verified by
// any).
type balancer struct {
	backends []*backend
	next     atomic.Uint64
	rp       *httputil.ReverseProxy
	tr       *http.Transport
	stop     context.CancelFunc
	wg       sync.WaitGroup
	srv      *http.Server
	URL      string
}

type backend struct {
	url *url.URL
	up  atomic.Bool
}

// errNoBackend: every backend failed its health check or its dial.
var errNoBackend = errors.New("soak balancer: no backend up")

func newBalancer(ln net.Listener, bases ...string) *balancer {
	b := &balancer{URL: "http://" + ln.Addr().String()}
	for _, s := range bases {
		u, _ := url.Parse(s)
		be := &backend{url: u}
		be.up.Store(true)
		b.backends = append(b.backends, be)
	}
	b.tr = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     20 * time.Second,
	}
	b.rp = &httputil.ReverseProxy{
		Rewrite:   func(*httputil.ProxyRequest) {}, // the transport picks the backend; Host stays the balancer's
		Transport: roundTripper(b.roundTrip),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
		FlushInterval: -1,
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	b.wg.Add(1)
	go b.check(ctx)
	b.srv = &http.Server{Handler: b.rp}
	go func() { _ = b.srv.Serve(ln) }()
	return b
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// roundTrip sends r to the next backend that is up, moving on while the
// connection cannot be opened.
func (b *balancer) roundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		r.Body.Close()
	}
	start := b.next.Add(1)
	n := uint64(len(b.backends))
	for i := range n {
		be := b.backends[(start+i)%n]
		if !be.up.Load() {
			continue
		}
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host = be.url.Scheme, be.url.Host
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		resp, err := b.tr.RoundTrip(out)
		if err == nil {
			return resp, nil
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			be.up.Store(false) // until the health check passes again
			continue
		}
		return nil, err
	}
	return nil, errNoBackend
}

// check probes every backend's /healthz every 500 ms.
func (b *balancer) check(ctx context.Context) {
	defer b.wg.Done()
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		for _, be := range b.backends {
			resp, err := c.Get(be.url.String() + "/healthz")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			be.up.Store(ok)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (b *balancer) close() {
	b.stop()
	b.wg.Wait()
	_ = b.srv.Close()
	b.tr.CloseIdleConnections()
}
