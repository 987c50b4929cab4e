// Package frontdoor is the proxy's edge toward clients: the listener guard
// that refuses bare-LF header blocks (conn.go), the TLS listener's
// hot-reloaded certificate and the upstream TLS settings (tls.go), which
// Host headers may be written into URIs (HostAllowed), and the identity
// types of verified mode (identity.go). It imports no other package of the
// proxy.
package frontdoor
