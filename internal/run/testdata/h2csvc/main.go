// Command h2csvc is an uninstrumented HTTP service for rootline run's tests
// that speaks HTTP/2 in cleartext reached by an HTTP/1.1 upgrade (RFC 7540
// §3.2), with no tracing code: LISTEN=host:port (default 127.0.0.1:0);
// CALL=host:port (optional downstream). It serves with
// golang.org/x/net/http2/h2c (which answers "Upgrade: h2c" with a 101 and
// serves the connection as HTTP/2). A leaf answers with the trace headers it
// received, one "name: value" line each, and the protocol; a middle service
// calls CALL with the same path over one connection of its own that it
// upgrades with its first request (stream 1) and then uses for HTTP/2
// streams 3, 5, ..., and answers with the downstream's body. It prints
// "listening <port>".
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"golang.org/x/net/http2/hpack"
)

var echo = []string{"traceparent", "tracestate", "b3"}

func main() {
	listen := os.Getenv("LISTEN")
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var up *upClient
	if call := os.Getenv("CALL"); call != "" {
		up = &upClient{addr: call}
	}
	h := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		var body []byte
		if up != nil {
			b, err := up.get(r.URL.RequestURI())
			if err != nil {
				http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
				return
			}
			body = b
		} else {
			var b strings.Builder
			for _, k := range echo {
				fmt.Fprintf(&b, "%s: %s\n", k, r.Header.Get(k))
			}
			fmt.Fprintf(&b, "proto: %s\n", r.Proto)
			body = []byte(b.String())
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body)
	}
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: h2c.NewHandler(http.HandlerFunc(h), &http2.Server{}), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// upClient is an HTTP/2 client that reaches its server by upgrading an
// HTTP/1.1 connection, as curl --http2 does (Go's own client does not
// upgrade): one connection, one call at a time.
type upClient struct {
	addr string
	mu   sync.Mutex
	conn net.Conn
	fr   *http2.Framer
	hb   bytes.Buffer
	enc  *hpack.Encoder
	next uint32
}

// clientSettings are what the client announces, in HTTP2-Settings and in
// its SETTINGS frame.
var clientSettings = []http2.Setting{{ID: http2.SettingEnablePush, Val: 0}, {ID: http2.SettingInitialWindowSize, Val: 1 << 20}}

func (c *upClient) get(path string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		b, err := c.upgrade(path)
		if err != nil && c.conn != nil {
			c.conn.Close()
			c.conn = nil
		}
		return b, err
	}
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	c.hb.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: c.addr}} {
		_ = c.enc.WriteField(f)
	}
	id := c.next
	c.next += 2
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		c.conn.Close()
		c.conn = nil
		return nil, err
	}
	b, err := c.response(id)
	if err != nil {
		c.conn.Close()
		c.conn = nil
	}
	return b, err
}

// upgrade dials, sends the upgrade request for path and reads its answer:
// stream 1's response after the server's 101.
func (c *upClient) upgrade(path string) ([]byte, error) {
	conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var payload []byte
	for _, s := range clientSettings {
		payload = append(payload, byte(s.ID>>8), byte(s.ID), byte(s.Val>>24), byte(s.Val>>16), byte(s.Val>>8), byte(s.Val))
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: " + c.addr + "\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n" +
		"HTTP2-Settings: " + base64.RawURLEncoding.EncodeToString(payload) + "\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101 ") {
		return nil, fmt.Errorf("upgrade refused: %q", strings.TrimSpace(status))
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line == "\r\n" || line == "\n" {
			break
		}
	}
	// The client's preface and SETTINGS follow the 101; the rest of what
	// the server writes is HTTP/2, stream 1 answering the request.
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		return nil, err
	}
	c.fr = http2.NewFramer(conn, br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hb)
	if err := c.fr.WriteSettings(clientSettings...); err != nil {
		return nil, err
	}
	c.next = 3
	return c.response(1)
}

// response reads frames until stream id ends, answering what the
// connection needs answered (SETTINGS, PING) and giving back flow control.
func (c *upClient) response(id uint32) ([]byte, error) {
	var body []byte
	status := ""
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := c.fr.WriteSettingsAck(); err != nil {
					return nil, err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			return nil, fmt.Errorf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return nil, fmt.Errorf("stream reset: %v", f.ErrCode)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				if s := f.PseudoValue("status"); s != "" {
					status = s
				}
				if f.StreamEnded() {
					return done(status, body)
				}
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				_ = c.fr.WriteWindowUpdate(0, uint32(n))
			}
			if f.StreamID == id {
				body = append(body, f.Data()...)
				if f.StreamEnded() {
					return done(status, body)
				}
			}
		}
	}
}

func done(status string, body []byte) ([]byte, error) {
	if status != "200" {
		return nil, errors.New("status " + status + ": " + string(body))
	}
	return body, nil
}
