"""Uninstrumented HTTP service for the tests of `rootline run`: no tracing code.

LISTEN=host:port; CALL=http://host:port (optional downstream). A leaf
answers with the trace headers it received, one per line; a middle service
calls CALL with the same path and answers with the downstream's body.
SPIN_MS busy-loops that long per request; BODY_KB pads a leaf's body.
A leaf sleeps sleep_ms (a query parameter) before it answers.
"""
import http.client
import os
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ECHO = ("traceparent", "b3", "x-request-id", "x-b3-traceid", "x-b3-spanid")
CALL = os.environ.get("CALL", "")
SPIN = float(os.environ.get("SPIN_MS", "0")) / 1000
PAD = b"p" * (int(os.environ.get("BODY_KB", "0")) * 1024)


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        end = time.thread_time() + SPIN
        while time.thread_time() < end:
            pass
        if CALL:
            u = urllib.parse.urlsplit(CALL)
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            c.request("GET", self.path)
            r = c.getresponse()
            body = r.read()
            c.close()
        else:
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            if "sleep_ms" in q:
                time.sleep(float(q["sleep_ms"][0]) / 1000)
            body = "".join("%s: %s\n" % (k, self.headers.get(k, "")) for k in ECHO).encode() + PAD
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


host, port = os.environ.get("LISTEN", "127.0.0.1:0").rsplit(":", 1)
srv = ThreadingHTTPServer((host, int(port)), H)
print("listening", srv.server_address[1], flush=True)
srv.serve_forever()
