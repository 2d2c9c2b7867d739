package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rootline/rootline/internal/bearer"
)

// The agent runs as root and can record any process of its node, so its API
// decides for each request who is asking (caller) and what that caller may
// do: a holder of the token, or root on the unix socket, may do everything;
// another user on the unix socket may register, dump and list only the
// processes it owns; a caller over TCP without the token gets nothing.

// caller is who sent a request to the agent's API.
type caller struct {
	// trusted: a holder of the token, or root over the unix socket. It may
	// use every route for every process.
	trusted bool
	// uid is a local caller's user (over the unix socket).
	uid uint32
}

// peerKey is the context key of a unix socket connection's peer.
type peerKey struct{}

// peer is what the kernel says about a unix socket connection's client.
type peer struct {
	uid uint32
	err error // the uid could not be read
}

// connContext records the peer's uid of a connection to the unix socket.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if uc, ok := c.(*net.UnixConn); ok {
		uid, err := peerUID(uc)
		return context.WithValue(ctx, peerKey{}, peer{uid: uid, err: err})
	}
	return ctx
}

type callerKey struct{}

// callerOf is the caller authorize found for r.
func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// authorize identifies the caller of every /api/ request, or answers 401
// (wrong or missing token over TCP) or 403 (TCP without a configured token;
// a socket caller whose uid cannot be read).
func (a *Agent) authorize(next http.Handler) http.Handler {
	tok := bearer.New(a.cfg.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, local := r.Context().Value(peerKey{}).(peer)
		auth := r.Header.Get("Authorization")
		var c caller
		switch {
		case tok.Required() && (!local || auth != ""):
			// Credentials sent are checked, on the socket too: a wrong
			// token is an error, not a fallback to the uid.
			if res := tok.Check(auth); res != bearer.OK {
				w.Header().Set("WWW-Authenticate", res.Challenge())
				writeError(w, http.StatusUnauthorized, res.Message())
				return
			}
			c.trusted = true
		case !local:
			msg := "the agent's API over TCP needs a token (ROOTLINE_AUTH_TOKEN or --auth.token-file on both sides)"
			if a.cfg.Socket != "" {
				msg += "; on this machine, use its unix socket " + a.cfg.Socket
			}
			writeError(w, http.StatusForbidden, msg)
			return
		case p.err != nil:
			writeError(w, http.StatusForbidden, "cannot tell who is calling on the unix socket: "+p.err.Error())
			return
		default:
			c = caller{trusted: p.uid == 0, uid: p.uid}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// requireTrusted answers 403 unless the caller is trusted: routes that are
// about the whole node (containers, kernel metrics) rather than one process.
func requireTrusted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := callerOf(r); !c.trusted {
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s %s is for root or a holder of the agent's token, not uid %d", r.Method, r.URL.Path, c.uid))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errNotOwner: a local caller asked about a process it does not own.
var errNotOwner = errors.New("not the process's owner")

// mayAct returns nil when c may register, dump or forget pid: c is
// trusted, or c's uid owns the process (see procOwner).
func (a *Agent) mayAct(c caller, pid int) error {
	if c.trusted {
		return nil
	}
	uid, err := procOwner(a.procRoot, pid)
	if err != nil {
		return err
	}
	if uid != c.uid {
		return fmt.Errorf("uid %d may not act on pid %d: %w (only root, the process's user or a holder of the agent's token may)", c.uid, pid, errNotOwner)
	}
	return nil
}

// procOwner returns the user that owns a process: the uid that its real,
// effective and saved uids all are. A process whose uids differ (a set-uid
// program) has no owner but root, as the kernel decides for ptrace.
func procOwner(root string, pid int) (uint32, error) {
	f, err := os.Open(filepath.Join(root, strconv.Itoa(pid), "status"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, errNoProcess
		}
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		ids := strings.Fields(rest)
		if len(ids) < 3 {
			break
		}
		if ids[0] != ids[1] || ids[0] != ids[2] {
			return 0, fmt.Errorf("pid %d runs with several uids (%s): %w", pid, strings.Join(ids[:3], ", "), errNotOwner)
		}
		uid, err := strconv.ParseUint(ids[0], 10, 32)
		if err != nil {
			break
		}
		return uint32(uid), nil
	}
	return 0, fmt.Errorf("malformed /proc/%d/status", pid)
}
