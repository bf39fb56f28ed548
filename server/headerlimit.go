package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
)

// net/http answers a request whose header exceeds MaxHeaderBytes itself,
// before any handler runs, by writing exactly this straight to the
// connection, in one write.
var headerTooLargeText = []byte("HTTP/1.1 431 Request Header Fields Too Large\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"431 Request Header Fields Too Large")

// problemListener wraps a plain-text HTTP listener so that net/http's 431
// answer goes out as the API's problem+json, like every other error. (Over
// TLS the answer is written encrypted, below this wrapper: it stays
// net/http's.)
type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

// problemConn replaces net/http's 431 answer when it is written.
type problemConn struct{ net.Conn }

func (c *problemConn) Write(p []byte) (int, error) {
	if len(p) != len(headerTooLargeText) || !bytes.Equal(p, headerTooLargeText) {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(headerTooLargeResponse); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite lets net/http half-close the connection after its answer, as
// it does on a *net.TCPConn.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// headerTooLargeResponse is the whole HTTP/1.1 answer sent instead.
var headerTooLargeResponse = func() []byte {
	body, _ := json.Marshal(problem{
		Type:   problemBase + kindHeaderTooLarge,
		Title:  http.StatusText(http.StatusRequestHeaderFieldsTooLarge),
		Status: http.StatusRequestHeaderFieldsTooLarge,
		Detail: fmt.Sprintf("the request's header is larger than %d bytes", http.DefaultMaxHeaderBytes),
	})
	body = append(body, '\n')
	return fmt.Appendf(nil, "HTTP/1.1 431 Request Header Fields Too Large\r\n"+
		"Content-Type: application/problem+json\r\nCache-Control: no-store\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}()
