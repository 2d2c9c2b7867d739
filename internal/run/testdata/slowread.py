"""A slow reader for the tests of `rootline run`: an HTTP/1.1 server that
waits until a request's bytes are in its socket (poll, which reads
nothing), then sleeps DELAY_MS before it reads them, so that every request
waits at least DELAY_MS in the socket's receive queue. Keep-alive and
pipelined requests are answered in order; each answer's body is "ok".

With CALL=host:port it is a slow caller instead: it reads each request at
once, makes one call to CALL (a new connection), waits until the response's
bytes are in that socket, sleeps DELAY_MS before it reads them, and answers
with the response's body: every response waits at least DELAY_MS in the
caller's socket.

LISTEN=host:port, DELAY_MS (default 80), CALL (optional).
"""
import os
import select
import socket
import threading
import time

DELAY = float(os.environ.get("DELAY_MS", "80")) / 1000
CALL = os.environ.get("CALL", "")


def read_head(c, buf):
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None, buf
        buf += d
    return buf.split(b"\r\n\r\n", 1)


def call(path):
    host, port = CALL.rsplit(":", 1)
    d = socket.create_connection((host, int(port)))
    try:
        d.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + CALL.encode() + b"\r\n\r\n")
        p = select.poll()
        p.register(d, select.POLLIN)
        p.poll()
        time.sleep(DELAY)
        head, body = read_head(d, b"")
        n = 0
        for line in (head or b"").split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":", 1)[1])
        while len(body) < n:
            x = d.recv(65536)
            if not x:
                break
            body += x
        return body
    finally:
        d.close()


def serve_calling(c):
    buf = b""
    try:
        while True:
            head, buf = read_head(c, buf)
            if head is None:
                return
            body = call(head.split(b" ")[1])
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    finally:
        c.close()


def serve(c):
    buf = b""
    try:
        while True:
            if b"\r\n\r\n" not in buf:
                p = select.poll()
                p.register(c, select.POLLIN)
                p.poll()
                time.sleep(DELAY)
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
    except OSError:
        pass
    finally:
        c.close()


host, port = os.environ.get("LISTEN", "127.0.0.1:0").rsplit(":", 1)
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, int(port)))
ls.listen(64)
print("listening", ls.getsockname()[1], flush=True)
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve_calling if CALL else serve, args=(c,), daemon=True).start()
