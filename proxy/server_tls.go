package proxy

import (
	"net"
	"strings"
	"time"

	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/valyala/fasthttp"
)

// ServeRedirect answers every request on ln (plain HTTP) with a permanent
// redirect (308: the method and body are kept) to the same path on the TLS
// listener: public_url's base when set, else the request's host, if it is
// one the proxy accepts (see frontdoor.HostAllowed), on tlsPort. Anything else gets
// 400, so the redirect never points at a host named by the client alone.
// Shutdown stops it.
func (s *Server) ServeRedirect(ln net.Listener, tlsPort string) error {
	srv := &fasthttp.Server{
		Name: "prestroid", NoDefaultServerHeader: true, NoDefaultDate: true, NoDefaultContentType: true,
		MaxRequestBodySize: 1 << 10, ReadTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second,
		DisablePreParseMultipartForm: true, CloseOnShutdown: true,
		Logger: frontdoor.FastHTTPLogger{L: s.log}, SecureErrorLogMessage: true, ErrorHandler: s.errorHandler,
		Handler: func(ctx *fasthttp.RequestCtx) {
			base := s.opts.PublicURL
			if base == "" || !strings.HasPrefix(base, "https://") {
				host := string(ctx.Host())
				if !frontdoor.HostAllowed(ctx, host, s.opts.AllowedHosts) {
					s.fail(ctx, frontdoor.ErrUnknownHost, false)
					return
				}
				h, _, err := net.SplitHostPort(host)
				if err != nil {
					h = host
				}
				if strings.Contains(h, ":") {
					h = "[" + h + "]"
				}
				base = "https://" + h
				if tlsPort != "443" {
					base += ":" + tlsPort
				}
			}
			ctx.Response.Header.Set("Location", base+string(ctx.Request.Header.RequestURI()))
			ctx.SetStatusCode(fasthttp.StatusPermanentRedirect)
		},
	}
	s.mu.Lock()
	s.extra = append(s.extra, srv)
	s.mu.Unlock()
	return srv.Serve(frontdoor.GuardListener{Listener: ln})
}
