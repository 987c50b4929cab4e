package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// allowRate applies the rate limits to a new query; false means it was
// answered with 503 and Retry-After.
func (s *Server) allowRate(ctx *fasthttp.RequestCtx) bool {
	user, group := s.rateIdentity(ctx)
	c, cancel := admission.StoreCtx()
	v := s.rate.Allow(c, user, group)
	cancel()
	if v.OK {
		return true
	}
	s.metrics.RateLimited.WithLabelValues(v.Scope).Inc()
	secs := max(1, int(math.Ceil(v.Wait.Seconds())))
	ctx.Response.Reset()
	ctx.Response.Header.Set("Retry-After", strconv.Itoa(secs))
	s.plain(ctx, fasthttp.StatusServiceUnavailable,
		"prestroid: rate limit of new queries per "+v.Scope+" exceeded; retry after "+strconv.Itoa(secs)+"s (the query was not sent to Trino)")
	return false
}

// rateIdentity is the user and group whose buckets a new query spends.
// Rate limits run before the EXPLAIN or probe that verifies the caller,
// so under IdentityVerified they never key on the bare claim (a forger
// would spend another user's tokens and get that user refused): the
// verified user when it is already known (a Bearer token the JWKS
// verifies, or a credential a cluster accepted within identity_ttl, as
// verify remembers it), else a hash of the credential itself
// (credentialBucket), whose group is its own.
func (s *Server) rateIdentity(ctx *fasthttp.RequestCtx) (user, group string) {
	h := &ctx.Request.Header
	if s.opts.Identity != frontdoor.IdentityVerified {
		return s.admissionIdentity(h, nil)
	}
	if v, ok := s.ident.Local(h); ok {
		return v.User, s.opts.Admission.GroupOf(v.User, h)
	}
	id := s.ident.Claimed(h)
	for _, c := range s.clusters {
		if s.ident.Accepted(frontdoor.CredentialKey(c.name, h, id)) {
			return id.User, s.opts.Admission.GroupOf(id.User, h)
		}
	}
	k := credentialBucket(ctx)
	return k, k
}

// credentialBucket names the rate-limit bucket of a credential no cluster
// has accepted yet: a hash of the Authorization header and the client
// certificate; the claimed user joins them only when neither is there (a
// cluster that takes a bare user name takes anyone's claim). The "~"
// keeps it apart from user names in the limits' keys and logs.
func credentialBucket(ctx *fasthttp.RequestCtx) string {
	h := &ctx.Request.Header
	d := sha256.New()
	auth := h.Peek("Authorization")
	d.Write(auth)
	d.Write([]byte{0})
	cert := false
	if cs := ctx.TLSConnectionState(); cs != nil && len(cs.PeerCertificates) > 0 {
		d.Write(cs.PeerCertificates[0].Raw)
		cert = true
	}
	if len(auth) == 0 && !cert {
		d.Write([]byte{0})
		d.Write(protocol.Peek(h, protocol.Dialect(h), "User"))
	}
	return "~credential:" + hex.EncodeToString(d.Sum(nil)[:12])
}
