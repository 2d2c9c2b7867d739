// Command wire is an uninstrumented HTTP/1.1 peer for the byte-exact tests of
// `rootline run`: it writes random messages in random pieces (write and
// writev, header blocks cut anywhere) and records the exact bytes it meant
// to send, so the test can check that the wire carries those bytes plus whole
// added header lines and nothing else.
//
//	LISTEN=addr OUT=dir   serve: answer each request /?seed=S with a random
//	                      response; record conn-N.bin per connection
//	TARGET=addr OUT=file  client: send N random requests (seed SEED), record them
//	TLS_LISTEN=addr       serve HTTPS (self-signed) and h2c-free HTTP/2 over TLS:
//	                      answers "secure <proto> <traceparent>"
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

func main() {
	if addr := os.Getenv("TLS_LISTEN"); addr != "" {
		serveTLS(addr)
		return
	}
	if addr := os.Getenv("LISTEN"); addr != "" {
		serve(addr, os.Getenv("OUT"))
		return
	}
	seed, _ := strconv.ParseUint(os.Getenv("SEED"), 10, 64)
	n, _ := strconv.Atoi(os.Getenv("N"))
	client(os.Getenv("TARGET"), os.Getenv("OUT"), seed, n)
}

// message returns a random HTTP/1.1 message: a request when req, else a
// response; with Content-Length or chunked bodies of random sizes.
func message(r *rand.Rand, req bool) []byte {
	var b []byte
	if req {
		b = fmt.Appendf(b, "POST /upload/%d?q=%d HTTP/1.1\r\nHost: peer\r\n", r.IntN(1000), r.IntN(1e6))
	} else {
		b = append(b, "HTTP/1.1 200 OK\r\nServer: wire\r\n"...)
	}
	for i := range r.IntN(6) {
		b = fmt.Appendf(b, "X-Filler-%d: %s\r\n", i, randText(r, r.IntN(200)))
	}
	size := []int{0, 1, 17, 1000, 40000, 300000}[r.IntN(6)]
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	if r.IntN(3) == 0 {
		b = append(b, "Transfer-Encoding: chunked\r\n\r\n"...)
		for len(body) > 0 {
			k := min(len(body), 1+r.IntN(9000))
			b = fmt.Appendf(b, "%x\r\n", k)
			b = append(b, body[:k]...)
			b = append(b, "\r\n"...)
			body = body[k:]
		}
		return append(b, "0\r\n\r\n"...)
	}
	b = fmt.Appendf(b, "Content-Length: %d\r\n\r\n", len(body))
	return append(b, body...)
}

func randText(r *rand.Rand, n int) []byte {
	const abc = "abcdefghijklmnopqrstuvwxyz0123456789-_ "
	t := make([]byte, n)
	for i := range t {
		t[i] = abc[r.IntN(len(abc)-1)]
	}
	return t
}

// send writes p in random pieces: single bytes, small and large writes, and
// writev with several buffers.
func send(c net.Conn, r *rand.Rand, p []byte) error {
	for len(p) > 0 {
		var k int
		switch r.IntN(4) {
		case 0:
			k = 1
		case 1:
			k = 1 + r.IntN(64)
		default:
			k = 1 + r.IntN(70000)
		}
		k = min(k, len(p))
		var err error
		if r.IntN(2) == 0 {
			_, err = c.Write(p[:k])
		} else {
			var bufs net.Buffers
			q := p[:k]
			for len(q) > 0 {
				j := min(len(q), 1+r.IntN(len(q)))
				bufs = append(bufs, q[:j])
				q = q[j:]
			}
			_, err = bufs.WriteTo(c)
		}
		if err != nil {
			return err
		}
		p = p[k:]
	}
	return nil
}

func serve(addr, dir string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening", l.Addr().(*net.TCPAddr).Port)
	var next atomic.Int64
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("conn-%d.bin", next.Add(1))))
			if err != nil {
				return
			}
			defer f.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				seed, _ := strconv.ParseUint(req.URL.Query().Get("seed"), 10, 64)
				r := rand.New(rand.NewPCG(seed, 7))
				m := message(r, false)
				if _, err := f.Write(m); err != nil {
					return
				}
				if err := send(c, r, m); err != nil {
					return
				}
			}
		}()
	}
}

func client(target, out string, seed uint64, n int) {
	c, err := net.Dial("tcp", target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r := rand.New(rand.NewPCG(seed, 11))
	var all []byte
	for range n {
		m := message(r, true)
		all = append(all, m...)
		if err := send(c, r, m); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := os.WriteFile(out, all, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_, _ = io.Copy(io.Discard, c)
}

func serveTLS(addr string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "wire"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	l, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("listening", l.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s %q", r.Proto, r.Header.Get("traceparent"))
	})}
	_ = srv.Serve(l)
}
