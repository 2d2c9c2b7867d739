package agentapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Errors of the clients, for errors.Is.
var (
	// ErrUnknownAgent is the server's 404 to a heartbeat or deregistration:
	// it forgot the agent, which must register again.
	ErrUnknownAgent = errors.New("server does not know this agent")
	// ErrBadAddress: an agent address or dump URL that is neither an
	// absolute http(s) URL nor unix:PATH with an absolute PATH.
	ErrBadAddress = errors.New("agent address must be an absolute http(s) URL or unix:/path/to/socket")
)

// Error is a non-success answer of the other side, with its message.
type Error struct {
	StatusCode int
	Status     string
	Message    string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "answered " + e.Status
	}
	return "answered " + e.Status + ": " + e.Message
}

// StatusOf returns the HTTP status of an *Error in err's chain, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// maxReply bounds the JSON replies the clients read.
const maxReply = 1 << 20

// socketHost is the host name of requests sent through a unix socket: the
// connection is the socket's whatever the URL says, and the Host header
// must not name a real host.
const socketHost = "rootline-agent"

// Address is where an agent's API is: an http(s) base URL, or a unix socket.
type Address struct {
	// Base is the URL the paths of the API are appended to; for a socket,
	// "http://rootline-agent".
	Base string
	// Socket is the unix socket's path, "" for TCP.
	Socket string
}

// ParseAddress parses an agent's address: "unix:/run/rootline/agent.sock"
// (also "unix:///run/…") or an absolute http(s) base URL such as
// "http://127.0.0.1:7070".
func ParseAddress(s string) (Address, error) {
	if p, ok := strings.CutPrefix(s, "unix:"); ok {
		p = strings.TrimPrefix(p, "//")
		if !filepath.IsAbs(p) {
			return Address{}, fmt.Errorf("%q: %w", s, ErrBadAddress)
		}
		return Address{Base: "http://" + socketHost, Socket: filepath.Clean(p)}, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Address{}, fmt.Errorf("%q: %w", s, ErrBadAddress)
	}
	return Address{Base: strings.TrimRight(s, "/")}, nil
}

// String is the address as ParseAddress reads it.
func (a Address) String() string {
	if a.Socket != "" {
		return "unix:" + a.Socket
	}
	return a.Base
}

// DumpURL is the dump URL an agent at this address registers.
func (a Address) DumpURL() string {
	if a.Socket != "" {
		return a.String()
	}
	return a.Base + DumpPath
}

// ParseDumpURL parses a registration's dump URL: unix:PATH, or any
// absolute http(s) URL (by convention an agent address + DumpPath). It
// returns the address and the URL the dump request is posted to.
func ParseDumpURL(s string) (Address, string, error) {
	a, err := ParseAddress(s)
	if err != nil {
		return a, "", err
	}
	if a.Socket != "" {
		return a, a.Base + DumpPath, nil
	}
	return Address{Base: strings.TrimSuffix(a.Base, DumpPath)}, s, nil
}

// ClientOptions are what a client needs besides the address.
type ClientOptions struct {
	// Token is sent as "Authorization: Bearer <token>" when not empty.
	Token string
	// TLS configures https addresses (nil: the system's roots).
	TLS *tls.Config
	// Timeout bounds each call (0: none; the context still does).
	Timeout time.Duration
	// SocketOwners, when not empty, are the uids a unix socket must belong
	// to: dialing anything else fails. A server dialing the socket a
	// registration names (anyone can register with a server that has no
	// token) must not talk to some other program's socket on its behalf.
	SocketOwners []uint32
}

// httpClient builds the http.Client for an address: TCP with TLS settings,
// or one that dials the unix socket for every request.
// IdleConnTimeout is how long a client of an agent keeps an idle
// connection; AgentIdleTimeout how long an agent keeps one open. The client
// gives up first: when an agent closed an idle connection just as the client
// sent a request on it, the request failed ("connection reset by peer") and
// a dump request is not sent again (a POST is not replayed).
const (
	IdleConnTimeout  = 30 * time.Second
	AgentIdleTimeout = 2 * time.Minute
)

func httpClient(a Address, o ClientOptions) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.IdleConnTimeout = IdleConnTimeout
	tr.TLSClientConfig = o.TLS
	if a.Socket != "" {
		path, owners := a.Socket, o.SocketOwners
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			if err := checkSocketOwner(path, owners); err != nil {
				return nil, err
			}
			return d.DialContext(ctx, "unix", path)
		}
		tr.DialTLSContext = nil
		tr.TLSClientConfig = nil
	}
	return &http.Client{Transport: tr, Timeout: o.Timeout}
}

// checkSocketOwner fails unless path is a socket owned by one of owners (any
// owner when owners is empty).
func checkSocketOwner(path string, owners []uint32) error {
	if len(owners) == 0 {
		return nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is not a unix socket", path)
	}
	uid, ok := fileOwner(fi)
	if !ok {
		return fmt.Errorf("%s: owner unknown", path)
	}
	for _, o := range owners {
		if uid == o {
			return nil
		}
	}
	return fmt.Errorf("socket %s belongs to uid %d, not to root or this process's user: refusing to send it requests", path, uid)
}

// call is one JSON request: in (when not nil) is the body, out (when not
// nil) receives a 2xx reply's JSON. Any status outside want is an *Error.
func call(ctx context.Context, hc *http.Client, token, method, u string, in, out any, want ...int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	resp, err := send(ctx, hc, token, method, u, "application/json", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := expect(resp, want...); err != nil {
		return err
	}
	if out != nil {
		// An empty reply leaves out as it is: a 202 or 204 need not say more.
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxReply)).Decode(out); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("bad reply to %s %s: %w", method, redact(u), err)
		}
	}
	return nil
}

// send is one request with the bearer token; contentType is set when body is not nil.
func send(ctx context.Context, hc *http.Client, token, method, u, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil && contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return hc.Do(req)
}

// expect returns an *Error unless resp's status is one of want (any 2xx
// when want is empty); it reads the error message from the body.
func expect(resp *http.Response, want ...int) error {
	ok := resp.StatusCode/100 == 2
	if len(want) > 0 {
		ok = false
		for _, w := range want {
			ok = ok || resp.StatusCode == w
		}
	}
	if ok {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := string(bytes.TrimSpace(b))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return &Error{StatusCode: resp.StatusCode, Status: resp.Status, Message: msg}
}

// redact drops a URL's query (artifact metadata) from error messages.
func redact(u string) string {
	s, _, _ := strings.Cut(u, "?")
	return s
}

// ServerClient is the agent's side of the server's agent and capture API.
// Its methods are safe for concurrent use.
type ServerClient struct {
	base  string
	token string
	hc    *http.Client
}

// NewServerClient returns a client of the server at base (an absolute
// http(s) URL). tlsCfg configures https (nil: the system's roots).
func NewServerClient(base, token string, tlsCfg *tls.Config) (*ServerClient, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q must be an absolute http(s) URL", base)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	return &ServerClient{base: strings.TrimRight(base, "/"), token: token, hc: &http.Client{Transport: tr}}, nil
}

// At returns a client of the same server API at another base URL, with the
// same token and connections (a scale-out detector that asked for a
// capture: DumpRequest.UploadURL); base "" is c itself.
func (c *ServerClient) At(base string) (*ServerClient, error) {
	if base == "" {
		return c, nil
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upload URL %q must be an absolute http(s) URL", base)
	}
	return &ServerClient{base: strings.TrimRight(base, "/"), token: c.token, hc: c.hc}, nil
}

// Register registers the agent (reg.AgentID empty) or heartbeats (the
// server's id in reg.AgentID; ErrUnknownAgent when the server forgot it).
func (c *ServerClient) Register(ctx context.Context, reg Registration) (RegistrationReply, error) {
	method, path := http.MethodPost, AgentsPath
	if reg.AgentID != "" {
		method, path = http.MethodPut, AgentsPath+"/"+url.PathEscape(reg.AgentID)
	}
	var reply RegistrationReply
	err := call(ctx, c.hc, c.token, method, c.base+path, reg, &reply, http.StatusOK)
	if reg.AgentID != "" && StatusOf(err) == http.StatusNotFound {
		return reply, ErrUnknownAgent
	}
	if err != nil {
		return reply, fmt.Errorf("server %w", err)
	}
	if reply.AgentID == "" {
		return reply, errors.New("bad registration reply: no agentId")
	}
	return reply, nil
}

// Deregister tells the server the agent stops.
func (c *ServerClient) Deregister(ctx context.Context, agentID string) error {
	err := call(ctx, c.hc, c.token, http.MethodDelete, c.base+AgentsPath+"/"+url.PathEscape(agentID), nil, nil)
	if err != nil {
		return fmt.Errorf("server %w", err)
	}
	return nil
}

// Upload sends one artifact of a capture; the error is an *Error when the
// server answered (StatusOf gives 404, 409, 413…).
func (c *ServerClient) Upload(ctx context.Context, captureID string, u Upload, data io.Reader) (UploadReply, error) {
	var reply UploadReply
	target := c.base + CapturesPath + "/" + url.PathEscape(captureID) + "/artifacts?" + u.Query().Encode()
	mt := u.MediaType
	if mt == "" {
		mt = "application/octet-stream"
	}
	resp, err := send(ctx, c.hc, c.token, http.MethodPost, target, mt, data)
	if err != nil {
		return reply, err
	}
	defer resp.Body.Close()
	if err := expect(resp, http.StatusCreated, http.StatusOK); err != nil {
		return reply, fmt.Errorf("server %w", err)
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, maxReply)).Decode(&reply)
	return reply, nil
}

// Complete ends a capture.
func (c *ServerClient) Complete(ctx context.Context, captureID string, cm Completion) error {
	err := call(ctx, c.hc, c.token, http.MethodPost, c.base+CapturesPath+"/"+url.PathEscape(captureID)+"/complete", cm, nil)
	if err != nil {
		return fmt.Errorf("server %w", err)
	}
	return nil
}

// CloseIdleConnections closes the client's idle connections.
func (c *ServerClient) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Upload is the metadata of one artifact upload. It travels in the query
// string (Query, ParseUpload) and the Content-Type header; the body is the
// artifact itself.
type Upload struct {
	Kind     string
	FileName string
	// MediaType is the Content-Type; empty means application/octet-stream.
	MediaType string
	// Start and End (Unix ns) default to the capture's window when 0.
	Start, End int64
	// Partial marks an artifact cut short (e.g. the target exited).
	Partial bool
	// Attributes are producer facts (overhead counters…).
	Attributes map[string]string
}

// Query encodes u's metadata as the upload's query string.
func (u Upload) Query() url.Values {
	q := url.Values{}
	q.Set("kind", u.Kind)
	if u.FileName != "" {
		q.Set("fileName", u.FileName)
	}
	if u.Start != 0 {
		q.Set("start", strconv.FormatInt(u.Start, 10))
	}
	if u.End != 0 {
		q.Set("end", strconv.FormatInt(u.End, 10))
	}
	q.Set("partial", strconv.FormatBool(u.Partial))
	if len(u.Attributes) > 0 {
		b, _ := json.Marshal(u.Attributes)
		q.Set("attrs", string(b))
	}
	return q
}

// ParseUpload reads an upload's metadata from its query string; MediaType
// is left for the caller, who has the header.
func ParseUpload(q url.Values) (Upload, error) {
	u := Upload{Kind: q.Get("kind"), FileName: q.Get("fileName"), Partial: q.Get("partial") == "true"}
	if u.Kind == "" {
		return u, errors.New("kind is required")
	}
	if s := q.Get("attrs"); s != "" {
		if err := json.Unmarshal([]byte(s), &u.Attributes); err != nil {
			return u, fmt.Errorf("attrs must be a JSON object of strings: %v", err)
		}
	}
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"start", &u.Start}, {"end", &u.End}} {
		if s := q.Get(p.name); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return u, errors.New(p.name + " must be Unix nanoseconds")
			}
			*p.dst = v
		}
	}
	return u, nil
}

// AgentClient calls an agent's API: the server sends it dump requests,
// `rootline run` registers the process it starts. Its methods are safe for
// concurrent use.
type AgentClient struct {
	addr    Address
	dumpURL string
	token   string
	hc      *http.Client
}

// NewAgentClient returns a client of the agent at addr (see ParseAddress).
func NewAgentClient(addr string, o ClientOptions) (*AgentClient, error) {
	a, err := ParseAddress(addr)
	if err != nil {
		return nil, err
	}
	return &AgentClient{addr: a, dumpURL: a.Base + DumpPath, token: o.Token, hc: httpClient(a, o)}, nil
}

// NewDumpClient returns a client that sends dump requests to a
// registration's dump URL (see ParseDumpURL).
func NewDumpClient(dumpURL string, o ClientOptions) (*AgentClient, error) {
	a, u, err := ParseDumpURL(dumpURL)
	if err != nil {
		return nil, err
	}
	return &AgentClient{addr: a, dumpURL: u, token: o.Token, hc: httpClient(a, o)}, nil
}

// Address is the agent's address.
func (c *AgentClient) Address() Address { return c.addr }

// Dump sends a dump request; nil means the agent accepted it (202).
func (c *AgentClient) Dump(ctx context.Context, req DumpRequest) (DumpAccepted, error) {
	var acc DumpAccepted
	err := call(ctx, c.hc, c.token, http.MethodPost, c.dumpURL, req, &acc, http.StatusAccepted)
	if err != nil {
		return acc, fmt.Errorf("agent %w", err)
	}
	return acc, nil
}

// RegisterProcess asks the agent to record a process under the given names
// and returns it as the agent now serves it.
func (c *AgentClient) RegisterProcess(ctx context.Context, p Process) (Process, error) {
	var out Process
	if err := call(ctx, c.hc, c.token, http.MethodPost, c.addr.Base+ProcessesPath, p, &out, http.StatusCreated); err != nil {
		return out, fmt.Errorf("agent %w", err)
	}
	return out, nil
}

// ForgetProcess asks the agent to stop recording a registered process.
func (c *AgentClient) ForgetProcess(ctx context.Context, pid int64) error {
	u := c.addr.Base + ProcessesPath + "/" + strconv.FormatInt(pid, 10)
	if err := call(ctx, c.hc, c.token, http.MethodDelete, u, nil, nil, http.StatusNoContent); err != nil {
		return fmt.Errorf("agent %w", err)
	}
	return nil
}

// Processes lists the agent's targets (those the caller may see).
func (c *AgentClient) Processes(ctx context.Context) ([]Process, error) {
	var out []Process
	if err := call(ctx, c.hc, c.token, http.MethodGet, c.addr.Base+ProcessesPath, nil, &out, http.StatusOK); err != nil {
		return nil, fmt.Errorf("agent %w", err)
	}
	return out, nil
}

// Do sends a request to any route of the agent's API (path with its query)
// and returns the response, whatever its status; the caller closes its body.
func (c *AgentClient) Do(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Response, error) {
	return send(ctx, c.hc, c.token, method, c.addr.Base+path, contentType, body)
}

// CloseIdleConnections closes the client's idle connections.
func (c *AgentClient) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Base is the URL the API's paths are appended to (for a unix socket, one
// that only HTTPClient reaches).
func (c *AgentClient) Base() string { return c.addr.Base }

// HTTPClient is the client's http.Client (it dials the socket of a unix
// address), for requests to the agent that carry their own bodies and
// headers: `rootline run`'s span batches to TracesPath.
func (c *AgentClient) HTTPClient() *http.Client { return c.hc }
