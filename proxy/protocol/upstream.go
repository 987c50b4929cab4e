package protocol

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"github.com/valyala/fasthttp"
)

// UpstreamError is a failed exchange with a cluster. Sent says whether the
// request may have reached Trino: after a POST /v1/statement reached Trino,
// the client must not be told to retry (429/502/503/504), or the query would
// be submitted twice.
//
// Poll says the request was a poll of a running query (GET nextUri). A
// query does not outlive its coordinator, and a poll that failed cannot be
// told apart from a dead one, so such a failure is a well-formed Trino
// error at once, never a 503 that clients retry for minutes against a
// query that is gone. (A cluster whose connections are all busy is not a
// failure of this kind: Poll is false, and the client retries.)
type UpstreamError struct {
	Cluster string
	Sent    bool
	Poll    bool
	Err     error
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("proxy: cluster %s: %v", e.Cluster, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// NotSent reports whether err happened before the request left the proxy:
// a failed dial, a dial timeout, no free connection, or a TLS handshake
// that failed (an https cluster whose certificate is not trusted: nothing
// was written on the connection).
func NotSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &rh) {
		return true
	}
	return errors.Is(err, fasthttp.ErrDialTimeout) || errors.Is(err, fasthttp.ErrNoFreeConns) ||
		errors.Is(err, fasthttp.ErrTLSHandshakeTimeout)
}
