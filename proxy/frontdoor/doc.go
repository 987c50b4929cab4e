// Package frontdoor is the proxy's edge toward clients: the listener guard
// that refuses bare-LF header blocks (conn.go), the TLS listener's
// hot-reloaded certificate and the upstream TLS settings (tls.go), which
// Host headers may be written into URIs (HostAllowed), the admin
// endpoints' token (admin.go), and the identity types of verified mode
// (identity.go) with the mechanics of verifying one (verify.go: the
// claimed identity, the credentials the cluster accepted lately, the local
// token check, the probe). The proxy decides when to verify, from what the
// query's estimate already asked the cluster. It imports only the protocol
// pieces of the proxy.
package frontdoor
