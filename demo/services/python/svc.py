#!/usr/bin/env python3
"""The demo's uninstrumented forwarding service (Python flavour).

With PROTOCOL=grpc it serves one unary gRPC method instead (svc_grpc.py,
grpcio) with the same work, faults and calls.

It must behave exactly like demo/services/go/main.go and
demo/services/java/Svc.java: same environment contract (SERVICE_NAME, LISTEN,
CALLS, WORK, FORWARD_HEADERS, ADMIN), same responses, same work and faults. It
contains no tracing code and, unless FORWARD_HEADERS=1, forwards no trace
header: complete traces must come from Rootline's syscall supervisor.

Standard library only. Downstream calls use http.client on a small pool of
keep-alive connections per downstream, each call made from the request's own
thread (ThreadingHTTPServer starts one thread per inbound connection).

Run: SERVICE_NAME=c LISTEN=127.0.0.1:18003 python3 demo/services/python/svc.py
"""

import http.client
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Must match the lists in main.go and Svc.java.
FORWARDED = ["traceparent", "tracestate", "b3", "x-b3-traceid", "x-b3-spanid",
             "x-b3-parentspanid", "x-b3-sampled", "x-b3-flags", "x-request-id"]
FAULT_DEFAULTS = {"lock": "10ms", "hold": "10ms", "gc": "1MB", "slow": "100ms", "disk": "1MB", "cpu": "10ms"}
SIZE_FAULTS = ("gc", "disk")


def parse_dur(s):
    """A number with unit us, ms or s (a bare number is ms), in seconds."""
    s = s.strip()
    mul = 1e-3
    for suf, m in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if s.endswith(suf):
            s, mul = s[: -len(suf)], m
            break
    try:
        v = float(s)
    except ValueError:
        v = -1
    if v < 0:
        raise ValueError('bad duration "%s" (want e.g. 20ms)' % s)
    return v * mul


def parse_size(s):
    """A number with unit B, KB, MB or GB (powers of 1024; a bare number is bytes)."""
    s = s.strip().upper()
    mul = 1
    for suf, m in (("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30), ("B", 1)):
        if s.endswith(suf):
            s, mul = s[: -len(suf)], m
            break
    try:
        v = float(s)
    except ValueError:
        v = -1
    if v < 0:
        raise ValueError('bad size "%s" (want e.g. 64KB)' % s)
    return int(v * mul)


def parse_work(s):
    """Reads "cpu=2ms,sleep=0ms,lock=0ms,alloc=0KB,disk=0KB"."""
    w = {"cpu": 0.0, "sleep": 0.0, "lock": 0.0, "alloc": 0, "disk": 0}
    for kv in s.split(","):
        kv = kv.strip()
        if not kv:
            continue
        if "=" not in kv:
            raise ValueError('"%s": want key=value' % kv)
        k, v = kv.split("=", 1)
        k = k.strip()
        if k not in w:
            raise ValueError('unknown key "%s": want cpu, sleep, lock, alloc or disk' % k)
        try:
            w[k] = parse_dur(v) if k in ("cpu", "sleep", "lock") else parse_size(v)
        except ValueError as e:
            raise ValueError("%s: %s" % (k, e)) from None
    return w


class Fault:
    def __init__(self, name, on, amount):
        self.on = on
        self.amount = amount
        self.value = parse_size(amount) if name in SIZE_FAULTS else parse_dur(amount)


NAME = os.environ.get("SERVICE_NAME") or "svc"
CALLS = [u.strip() for u in os.environ.get("CALLS", "").split(",") if u.strip()]
FORWARD = os.environ.get("FORWARD_HEADERS") == "1"
try:
    WORK = parse_work(os.environ.get("WORK", ""))
except ValueError as e:
    sys.exit("%s: WORK: %s" % (NAME, e))
HOT = threading.Lock()  # the process-wide lock of lock= work and the lock fault
FAULTS_MU = threading.Lock()
FAULTS = {n: Fault(n, False, a) for n, a in FAULT_DEFAULTS.items()}
# The gc fault's last 8 allocations stay alive, so collections have a large
# live set to traverse. Same in main.go and Svc.java.
RETAINED = [None] * 8
RETAIN_AT = [0]
# Idle keep-alive connections per downstream host:port, shared by the request threads.
IDLE_MU = threading.Lock()
IDLE = {}


def spin(sec):
    """Burns sec of CPU time on the calling thread: time the thread spends on a
    CPU, read from its CPU clock (time.thread_time), not wall time. A CPU quota,
    a busy neighbour or other requests then stretch the request as they stretch
    real CPU-bound code: the wall time grows, the CPU time per request stays
    sec. Must match main.go and Svc.java.

    The spinning thread holds the GIL except at the interpreter's switch
    interval (5 ms), so the requests of one process spin one at a time: a
    Python service does at most one CPU of this work however many requests it
    serves at once, and n concurrent requests each take about n times their
    cpu= in wall time, as CPU-bound pure-Python code does."""
    if sec <= 0:
        return
    end = time.thread_time() + sec
    x = 1
    while time.thread_time() < end:
        for _ in range(200):
            x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF


def alloc_drop(n):
    keep = []
    while n > 0:
        b = bytearray(min(n, 4096))
        b[0] = 1
        keep.append(b)
        n -= len(b)


def gc_storm(n):
    """Allocates n bytes as a chain of small objects (~64 bytes each) and keeps
    it alive until 8 later storms replace it. The chain it replaces is freed
    after FAULTS_MU is let go: freeing megabytes of objects takes long, and
    done under the lock it made the other requests wait for the lock (which
    the kernel rightly saw as lock contention), not for this work."""
    head = None
    for _ in range(n // 64):
        head = [head, None]
    with FAULTS_MU:
        i = RETAIN_AT[0] % len(RETAINED)
        old, RETAINED[i] = RETAINED[i], head
        RETAIN_AT[0] += 1
    del old


def write_sync(n):
    fd, path = tempfile.mkstemp(prefix="svc-disk-")
    try:
        buf = bytes(64 << 10)
        while n > 0:
            m = min(n, len(buf))
            os.write(fd, buf[:m])
            n -= m
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(path)


def do_work(w):
    spin(w["cpu"])
    if w["lock"] > 0:
        with HOT:
            spin(w["lock"])
    if w["alloc"] > 0:
        alloc_drop(w["alloc"])
    if w["disk"] > 0:
        write_sync(w["disk"])
    if w["sleep"] > 0:
        time.sleep(w["sleep"])


def lock_holder():
    """The lock fault: while it is on, a thread holds the hot lock across a
    slow call (a sleep of the fault's amount), lets it go for a quarter of
    that on average, and again; each request takes the lock on its way (request_work),
    so requests queue behind the holder: lock contention, not work of their
    own. Same in main.go and Svc.java."""
    while True:
        with FAULTS_MU:
            f = FAULTS["lock"]
        if not f.on or f.value <= 0:
            time.sleep(0.05)
            continue
        with HOT:
            time.sleep(f.value)
        # Free for a quarter of the hold on average, at random: a fixed
        # cycle would let requests sent one after the other fall into step
        # with it and never wait.
        time.sleep(random.uniform(0, f.value / 2))


def request_work():
    """One request's WORK plus the faults that are on, on the calling thread:
    the same for an HTTP request and a gRPC call."""
    with FAULTS_MU:
        f = dict(FAULTS)
    w = dict(WORK)
    if f["cpu"].on:
        w["cpu"] += f["cpu"].value
    if f["slow"].on:
        w["sleep"] += f["slow"].value
    if f["lock"].on:
        # The hot lock is held by lock_holder most of the time: the request
        # waits for it.
        with HOT:
            pass
    if f["hold"].on:
        w["lock"] += f["hold"].value  # busy work while holding the hot lock
    if f["disk"].on:
        w["disk"] += f["disk"].value
    do_work(w)
    if f["gc"].on:
        gc_storm(f["gc"].value)


def host_of(u):
    """Names a downstream in the response body: its host without the port."""
    return urllib.parse.urlsplit(u).hostname or u


def call(headers, u):
    """GET u on an idle keep-alive connection to its host (or a new one); returns the status."""
    p = urllib.parse.urlsplit(u)
    key = p.netloc
    fwd = {}
    if FORWARD:
        for h in FORWARDED:
            v = headers.get(h)
            if v is not None:
                fwd[h] = v
    path = p.path or "/"
    if p.query:
        path += "?" + p.query
    for attempt in (0, 1):
        with IDLE_MU:
            idle = IDLE.setdefault(key, [])
            c = idle.pop() if idle and attempt == 0 else None
        reused = c is not None
        if c is None:
            c = http.client.HTTPConnection(p.hostname, p.port or 80, timeout=30)
        try:
            c.request("GET", path, headers=fwd)
            r = c.getresponse()
            r.read()
        except (http.client.HTTPException, OSError):
            c.close()
            # A kept-alive connection the server closed: retry once on a new one.
            if not reused:
                raise
            continue
        if r.will_close:
            c.close()
        else:
            with IDLE_MU:
                if len(IDLE[key]) < 64:
                    IDLE[key].append(c)
                    c = None
            if c is not None:
                c.close()
        return r.status
    raise OSError("unreachable")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive inbound
    server_version = "svc-python"

    def setup(self):
        super().setup()
        # The status line and headers and the body leave in separate writes:
        # without TCP_NODELAY, Nagle's algorithm and the peer's delayed ACK
        # hold the body back ~40 ms. Go sets it by default; Svc.java too.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):  # never log per request
        pass

    def reply(self, status, ctype, body):
        b = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def drain(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def do_GET(self):
        self.drain()
        if self.path == "/healthz":
            self.reply(200, "text/plain", "ok\n")
            return
        request_work()
        status, parts = 200, []
        for u in CALLS:
            try:
                code = call(self.headers, u)
                parts.append("%s=%d" % (host_of(u), code))
                if code < 200 or code > 299:
                    status = 502
            except (http.client.HTTPException, OSError):
                status = 502
                parts.append("%s=ERR" % host_of(u))
        self.reply(status, "text/plain", "%s %s [%s]\n" % (NAME, "ok" if status == 200 else "fail", " ".join(parts)))

    do_POST = do_GET
    do_PUT = do_GET


class AdminHandler(Handler):
    def do_GET(self):
        self.drain()
        if self.path == "/healthz":
            self.reply(200, "text/plain", "ok\n")
        elif self.path == "/faults":
            self.list_faults()
        else:
            self.reply(404, "text/plain", "not found\n")

    def do_POST(self):
        body = self.drain()
        if self.path != "/fault":
            self.reply(404, "text/plain", "not found\n")
            return
        try:
            req = json.loads(body or b"{}")
            if not isinstance(req, dict):
                raise ValueError("want a JSON object")
        except ValueError as e:
            self.reply(400, "text/plain", "bad JSON: %s\n" % e)
            return
        name = req.get("name", "")
        with FAULTS_MU:
            if name not in FAULTS:
                self.reply(400, "text/plain", 'unknown fault "%s": want lock, hold, gc, slow, disk or cpu\n' % name)
                return
            amount = req.get("amount") or FAULTS[name].amount
            try:
                FAULTS[name] = Fault(name, bool(req.get("on")), amount)
            except ValueError as e:
                self.reply(400, "text/plain", "fault %s: amount: %s\n" % (name, e))
                return
        self.list_faults()

    def list_faults(self):
        with FAULTS_MU:
            d = {n: {"on": f.on, "amount": f.amount} for n, f in FAULTS.items()}
        self.reply(200, "application/json", json.dumps(d, separators=(",", ":")) + "\n")


def split_addr(a):
    host, _, port = a.rpartition(":")
    return host, int(port)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # A client that goes away (reset, broken pipe, timeout) is normal
        # traffic, not worth a traceback per request; anything else is a bug.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main():
    listen = os.environ.get("LISTEN") or "0.0.0.0:8080"
    admin = os.environ.get("ADMIN") or "127.0.0.1:0"
    protocol = os.environ.get("PROTOCOL") or "http"
    threading.Thread(target=lock_holder, daemon=True, name="lock-holder").start()
    if protocol == "grpc":
        main_grpc(listen, admin)
        return
    if protocol != "http":
        sys.exit('%s: PROTOCOL "%s": want http or grpc' % (NAME, protocol))
    srv = Server(split_addr(listen), Handler)
    if admin != "127.0.0.1:0":
        adm = Server(split_addr(admin), AdminHandler)
        threading.Thread(target=adm.serve_forever, daemon=True).start()
    print("svc-python %s listening on %s:%d (admin %s), calls %s, work \"%s\", forward-headers %s, pid %d"
          % (NAME, srv.server_address[0], srv.server_address[1], admin, CALLS,
             os.environ.get("WORK", ""), FORWARD, os.getpid()), file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


def main_grpc(listen, admin):
    """The gRPC mode (PROTOCOL=grpc, svc_grpc.py): one unary method with the
    same work, faults and calls; the fault API stays HTTP/1. grpcio is
    imported only here, so the HTTP mode needs nothing beyond the standard
    library."""
    import svc_grpc  # next to this file: on sys.path when run as a script

    if admin != "127.0.0.1:0":
        adm = Server(split_addr(admin), AdminHandler)
        threading.Thread(target=adm.serve_forever, daemon=True).start()
    svc_grpc.serve(NAME, listen, CALLS, FORWARDED if FORWARD else (), request_work, host_of,
                   lambda port: print("svc-python %s listening on %s (admin %s), protocol grpc, calls %s, "
                                      "work \"%s\", forward-headers %s, pid %d"
                                      % (NAME, "%s:%d" % (split_addr(listen)[0], port), admin, CALLS,
                                         os.environ.get("WORK", ""), FORWARD, os.getpid()),
                                      file=sys.stderr, flush=True))


if __name__ == "__main__":
    main()
