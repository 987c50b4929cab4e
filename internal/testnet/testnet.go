// Package testnet holds network fakes for tests of several packages: things
// a real server does that no library fake does.
package testnet

import (
	"net"
	"sync"
	"testing"
)

// Hanging starts a listener that accepts connections and never answers on
// them (a cluster that is up at the TCP level and stuck above it), closed
// with its connections when the test ends; it returns its http:// URL.
func Hanging(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}
