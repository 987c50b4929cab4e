package testnet

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestHangingAcceptsAndNeverAnswers(t *testing.T) {
	addr := strings.TrimPrefix(Hanging(t), "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the listener refused: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("it answered: %d bytes, %v", n, err)
	}
}
