package agentapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseAddressAndDumpURL(t *testing.T) {
	for _, tc := range []struct {
		in, base, socket, dumpURL, post string
		err                             bool
	}{
		{in: "unix:/run/rootline/agent.sock", base: "http://rootline-agent", socket: "/run/rootline/agent.sock",
			dumpURL: "unix:/run/rootline/agent.sock", post: "http://rootline-agent/api/v1/dump"},
		{in: "unix:///run/x/../agent.sock", base: "http://rootline-agent", socket: "/run/agent.sock",
			dumpURL: "unix:/run/agent.sock", post: "http://rootline-agent/api/v1/dump"},
		{in: "http://127.0.0.1:7070/", base: "http://127.0.0.1:7070", dumpURL: "http://127.0.0.1:7070/api/v1/dump", post: "http://127.0.0.1:7070/api/v1/dump"},
		{in: "https://node-1:7070/agent", base: "https://node-1:7070/agent", dumpURL: "https://node-1:7070/agent/api/v1/dump", post: "https://node-1:7070/agent/api/v1/dump"},
		{in: "unix:agent.sock", err: true},
		{in: "/run/agent.sock", err: true},
		{in: "ftp://x/", err: true},
		{in: "http://", err: true},
	} {
		a, err := ParseAddress(tc.in)
		if tc.err {
			if !errors.Is(err, ErrBadAddress) {
				t.Errorf("ParseAddress(%q) = %+v, %v; want ErrBadAddress", tc.in, a, err)
			}
			continue
		}
		if err != nil || a.Base != tc.base || a.Socket != tc.socket || a.DumpURL() != tc.dumpURL {
			t.Errorf("ParseAddress(%q) = %+v (dump URL %q), %v", tc.in, a, a.DumpURL(), err)
			continue
		}
		// A registration's dump URL gives the address back and where to post.
		b, post, err := ParseDumpURL(a.DumpURL())
		if err != nil || b != a || post != tc.post {
			t.Errorf("ParseDumpURL(%q) = %+v %q %v, want %+v %q", a.DumpURL(), b, post, err, a, tc.post)
		}
	}
}

func TestUploadQueryRoundTrip(t *testing.T) {
	u := Upload{Kind: "cpu", FileName: "cpu 1.pb.gz", Start: 5, End: 9, Partial: true, Attributes: map[string]string{"samples": "812", "a&b": "c=d"}}
	got, err := ParseUpload(u.Query())
	if err != nil || !reflect.DeepEqual(got, u) {
		t.Fatalf("ParseUpload(Query) = %+v, %v; want %+v", got, err, u)
	}
	for q, msg := range map[string]string{
		"":                       "kind is required",
		"kind=cpu&attrs=[1]":     "attrs must be a JSON object of strings",
		"kind=cpu&start=soon":    "start must be Unix nanoseconds",
		"kind=cpu&end=1e9&start": "end must be Unix nanoseconds",
	} {
		v, _ := url.ParseQuery(q)
		if _, err := ParseUpload(v); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseUpload(%q) = %v, want %q", q, err, msg)
		}
	}
}

// TestSocketOwners: a client limited to some owners does not talk to a
// socket of another user.
func TestSocketOwners(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	me := uint32(os.Geteuid())
	for _, tc := range []struct {
		owners []uint32
		ok     bool
	}{{nil, true}, {[]uint32{me}, true}, {[]uint32{me + 1}, false}} {
		c, err := NewDumpClient("unix:"+path, ClientOptions{SocketOwners: tc.owners})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Dump(context.Background(), DumpRequest{CaptureID: "c"})
		if (err == nil) != tc.ok || (!tc.ok && !strings.Contains(err.Error(), "belongs to uid")) {
			t.Errorf("owners %v: Dump = %v, want ok=%v", tc.owners, err, tc.ok)
		}
		c.CloseIdleConnections()
	}
}

// TestClientDropsIdleConnectionsFirst: a client of an agent closes an idle
// connection before the agent would, so that a dump request is never
// written on a connection the agent is closing (it failed with "connection
// reset by peer" in a demo run, and a POST is not replayed).
func TestClientDropsIdleConnectionsFirst(t *testing.T) {
	c, err := NewAgentClient("http://127.0.0.1:1", ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := c.hc.Transport.(*http.Transport)
	if tr.IdleConnTimeout <= 0 || tr.IdleConnTimeout >= AgentIdleTimeout {
		t.Fatalf("client idle timeout %v, agent's %v: the client must give up first", tr.IdleConnTimeout, AgentIdleTimeout)
	}
}
