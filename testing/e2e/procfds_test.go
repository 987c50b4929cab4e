package e2e

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestFDKinds classifies this process's own sockets: a listener, the
// connection accepted on it and the one dialled to it.
func TestFDKinds(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	before, err := FDKinds(os.Getpid(), port, map[string]string{port: "upstream"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := FDKinds(os.Getpid(), port, map[string]string{port: "upstream"})
	if err != nil {
		t.Fatal(err)
	}
	if before["listen"] < 1 || after["listen"] != before["listen"] || after["clients"] != before["clients"]+1 || after["upstream"] != before["upstream"]+1 {
		t.Errorf("before %v, after dialling and accepting %v: want one more client and one more upstream", before, after)
	}
}
