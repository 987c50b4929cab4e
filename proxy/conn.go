package proxy

import (
	"errors"
	"fmt"
	"net"

	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/valyala/fasthttp"
)

// errorHandler answers requests fasthttp could not read: 413 for a body over
// MaxRequestBodyBytes (not fasthttp's 400), 431 for a header block over
// MaxHeaderBytes, 408 for a read timeout, 400 otherwise. The message never
// echoes the request.
func (s *Server) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.plain(ctx, fasthttp.StatusRequestEntityTooLarge,
			fmt.Sprintf("prestroid: request body over %d bytes (max_request_body_bytes)", s.opts.MaxRequestBodyBytes))
	case errors.As(err, &small):
		s.plain(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("prestroid: request header block over %d bytes (max_header_bytes)", s.opts.MaxHeaderBytes))
	case errors.Is(err, frontdoor.ErrBareLF):
		s.plain(ctx, fasthttp.StatusBadRequest, "prestroid: bad request: header lines must end in CRLF")
	case errors.As(err, &ne) && ne.Timeout():
		s.plain(ctx, fasthttp.StatusRequestTimeout, "prestroid: request timeout")
	default:
		s.plain(ctx, fasthttp.StatusBadRequest, "prestroid: malformed request")
	}
}
