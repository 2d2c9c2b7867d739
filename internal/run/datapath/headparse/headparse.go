// Package headparse runs the in-kernel datapath's request-head parser
// (bpf/run/parse.h, bpf/run/context.h) in user space, so that tests can feed
// it the same bytes as httpstream's parser and compare what the two find:
// the head's end, its framing, the trace context, tracestate and
// x-request-id, and a response's timing fields. Start compiles c/main.c, which includes those headers, with
// the system C compiler and keeps it running as a filter; rootline itself
// runs the parser only in the kernel.
package headparse

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Status says how far a head got.
type Status int32

// The statuses of a parse (HP_* in c/headparse.h).
const (
	// NotHTTP: the start line is not an HTTP/1.x request line (the
	// connection goes opaque).
	NotHTTP Status = -2
	// More: the head has not ended within the bytes given.
	More Status = -1
	// Head: a complete head.
	Head Status = 1
)

// Header bits (HD_* in bpf/run/state.h) a Result's Has may carry.
const (
	HasRequestID = 0x100
	HasCL        = 0x200
	HasChunked   = 0x400
	HasBadCL     = 0x4000
	HasBadField  = 0x8000
	// HasTEOther: Transfer-Encoding whose last coding is not chunked (a
	// request so framed is refused).
	HasTEOther = 0x20000
)

// Result is what the datapath's parser found in a request head.
type Result struct {
	Status  Status
	HeadLen int // through the final line break
	Has     uint32
	IsHead  bool // a HEAD request
	CL      uint64
	// The trace context, when CtxOK.
	CtxOK      bool
	W3C        bool
	Sampled    bool
	Trace      [16]byte
	Span       uint64
	Denied     bool // no context and a B3 decision not to sample
	TraceState string
	RequestID  string
	// Responses: how the body is delimited (RB_* in bpf/run/parse.h) and
	// the status code.
	Framing    int
	StatusCode int
	// Responses: whether the timing fields (either form) gave a server
	// time, and then it and the largest wait they report, in µs
	// (decode_timing in bpf/run/parse.h).
	Timed    bool
	ServerUs uint64
	WaitUs   uint64
}

// Response framings (RB_* in bpf/run/parse.h).
const (
	RBOpaque  = 0
	RBInterim = 1
	RBNone    = 2
	RBChunked = 3
	RBLength  = 4
	RBClose   = 5
)

// answerSize is sizeof(struct hp_req).
const answerSize = 864

// ErrNoCompiler: there is no C compiler to build the parser with.
var ErrNoCompiler = errors.New("headparse: no C compiler ($CC, cc, gcc or clang; scripts/deps.sh installs gcc)")

// Parser is a running build of the datapath's parser. Its methods are safe
// for concurrent use.
type Parser struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	maxHead int
	buf     [answerSize]byte
}

// Start compiles the parser into dir and starts it.
func Start(dir string) (*Parser, error) {
	cc := ""
	for _, c := range []string{os.Getenv("CC"), "cc", "gcc", "clang"} {
		if c == "" {
			continue
		}
		if _, err := exec.LookPath(c); err == nil {
			cc = c
			break
		}
	}
	if cc == "" {
		return nil, ErrNoCompiler
	}
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Dir(self)
	bpf := filepath.Join(src, "..", "..", "..", "..", "bpf")
	// Read every source the compiler will: go test then knows them as
	// inputs of the test, and a change to them is not hidden by its cache.
	files, _ := filepath.Glob(filepath.Join(bpf, "run", "*.h"))
	files = append(files, filepath.Join(bpf, "run_datapath.h"), filepath.Join(src, "c", "main.c"), filepath.Join(src, "c", "headparse.h"))
	for _, f := range files {
		if _, err := os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("headparse: %v", err)
		}
	}
	bin := filepath.Join(dir, "headparse")
	build := exec.Command(cc, "-O1", "-Wall", "-Wno-unused-function", "-Wno-unknown-pragmas",
		"-I", bpf, "-I", filepath.Join(src, "c"),
		"-o", bin, filepath.Join(src, "c", "main.c"))
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("headparse: %s: %v\n%s", cc, err, out)
	}
	p := &Parser{cmd: exec.Command(bin)}
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReader(out)
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	var hello [8]byte
	if _, err := io.ReadFull(p.out, hello[:]); err != nil {
		p.Close()
		return nil, fmt.Errorf("headparse: %v", err)
	}
	p.maxHead = int(binary.LittleEndian.Uint32(hello[:4]))
	if n := binary.LittleEndian.Uint32(hello[4:]); n != answerSize {
		p.Close()
		return nil, fmt.Errorf("headparse: answers of %d bytes, want %d (c/headparse.h and this file disagree)", n, answerSize)
	}
	return p, nil
}

// MaxHead is the bytes of a head the datapath keeps (RD_HEAD); ParseRequest
// looks at no more.
func (p *Parser) MaxHead() int { return p.maxHead }

// Close stops the parser.
func (p *Parser) Close() error {
	p.in.Close()
	return p.cmd.Wait()
}

// ParseRequest runs the datapath's parser on the request head b (at most
// MaxHead bytes are used), fed in two pieces split at split (0: one piece).
func (p *Parser) ParseRequest(b []byte, split int) (Result, error) {
	return p.parse(b, split, 0)
}

// ParseResponse runs it on the response head b; headReq: the response
// answers a HEAD request.
func (p *Parser) ParseResponse(b []byte, split int, headReq bool) (Result, error) {
	flags := uint32(1)
	if headReq {
		flags |= 2
	}
	return p.parse(b, split, flags)
}

func (p *Parser) parse(b []byte, split int, flags uint32) (Result, error) {
	b = b[:min(len(b), p.maxHead)]
	split = max(0, min(split, len(b)))
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := make([]byte, 12, 12+len(b))
	binary.LittleEndian.PutUint32(msg, uint32(len(b)))
	binary.LittleEndian.PutUint32(msg[4:], uint32(split))
	binary.LittleEndian.PutUint32(msg[8:], flags)
	if _, err := p.in.Write(append(msg, b...)); err != nil {
		return Result{}, fmt.Errorf("headparse: %v", err)
	}
	a := p.buf[:]
	if _, err := io.ReadFull(p.out, a); err != nil {
		return Result{}, fmt.Errorf("headparse: %v", err)
	}
	le := binary.LittleEndian
	r := Result{
		Status:  Status(int32(le.Uint32(a[0:]))),
		HeadLen: int(le.Uint32(a[4:])),
		Has:     le.Uint32(a[8:]),
		IsHead:  le.Uint32(a[12:]) != 0,
		CL:      le.Uint64(a[16:]),
		CtxOK:   a[24] != 0,
		Sampled: a[25] != 0,
		W3C:     a[26] != 0,
		Denied:  a[27] != 0,
		Span:    le.Uint64(a[48:]),
	}
	copy(r.Trace[:], a[28:44])
	tsLen, ridLen := min(int(le.Uint32(a[56:])), 512), min(int(le.Uint32(a[60:])), 256)
	r.TraceState = string(a[64 : 64+tsLen])
	r.RequestID = string(a[576 : 576+ridLen])
	r.Framing = int(int32(le.Uint32(a[832:])))
	r.StatusCode = int(le.Uint32(a[836:]))
	r.ServerUs = le.Uint64(a[840:])
	r.WaitUs = le.Uint64(a[848:])
	r.Timed = le.Uint32(a[856:]) != 0
	return r, nil
}
