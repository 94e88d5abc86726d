package redisstore

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// startDropProxy listens on loopback and relays each connection to target, except that once a
// client sends EVALSHA or EVAL, the proxy forwards it and then closes the client's connection
// without relaying the reply. It stops with the test.
func startDropProxy(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(s)
			var dropped sync.Once
			drop := make(chan struct{})
			wg.Go(func() { // client -> server
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						// Mark the drop before forwarding, so that the reply can never be relayed.
						isEval := bytes.Contains(bytes.ToLower(buf[:n]), []byte("eval"))
						if isEval {
							dropped.Do(func() { close(drop) })
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
						if isEval {
							_ = c.Close()
							return
						}
					}
					if err != nil {
						_ = s.Close()
						return
					}
				}
			})
			wg.Go(func() { // server -> client, until the drop
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					select {
					case <-drop:
						_ = s.Close()
						return
					default:
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						if err != io.EOF {
							_ = c.Close()
						}
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}
