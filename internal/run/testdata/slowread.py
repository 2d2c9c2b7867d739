"""A slow reader for the tests of `rootline run`: an HTTP/1.1 server that
waits until a request's bytes are in its socket (poll, which reads
nothing), then sleeps DELAY_MS before it reads them, so that every request
waits at least DELAY_MS in the socket's receive queue. Keep-alive and
pipelined requests are answered in order; each answer's body is "ok".

LISTEN=host:port, DELAY_MS (default 80).
"""
import os
import select
import socket
import threading
import time

DELAY = float(os.environ.get("DELAY_MS", "80")) / 1000


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
    threading.Thread(target=serve, args=(c,), daemon=True).start()
