"""The gRPC mode of svc.py (PROTOCOL=grpc), with grpcio.

One unary method on h2c, served by a generic handler (no generated code:
messages are raw bytes, the request ignored, the answer the HTTP mode's body
text), doing the same work and faults as the HTTP handler on grpcio's thread
pool, then calling each downstream in order over gRPC from that thread. A
failed downstream makes the call fail with UNAVAILABLE (the gRPC status of
HTTP's 502 Bad Gateway), the body text as its message. Must behave like the
gRPC modes of main.go (grpc.go) and Svc.java.
"""

import urllib.parse
from concurrent import futures

import grpc

# The method the services call downstream (and the demo's load generator
# calls); a service answers any method the same way.
METHOD = "/rootline.demo.Svc/Call"


def target(u):
    """The host:port of a CALLS URL (http://host:port/path)."""
    p = urllib.parse.urlsplit(u)
    if not p.hostname or not p.port:
        raise ValueError('"%s": want http://host:port/ or grpc://host:port' % u)
    return "%s:%d" % (p.hostname, p.port)


class Handler(grpc.GenericRpcHandler):
    def __init__(self, name, calls, forwarded, request_work, host_of):
        self.name = name
        self.forwarded = forwarded
        self.request_work = request_work
        # One HTTP/2 connection per downstream, its streams multiplexed: what
        # gRPC clients do. Loopback and pod addresses never go through a
        # proxy the environment names.
        self.calls = [(host_of(u), grpc.insecure_channel(target(u), options=[("grpc.enable_http_proxy", 0)])
                       .unary_unary(METHOD)) for u in calls]
        self.handler = grpc.unary_unary_rpc_method_handler(self.serve)

    def service(self, details):
        return self.handler

    def serve(self, req, ctx):
        self.request_work()
        md = {}
        if self.forwarded:
            for k, v in ctx.invocation_metadata():
                if k in self.forwarded and k not in md:
                    md[k] = v
        ok, parts = True, []
        for host, stub in self.calls:
            try:
                stub(b"", metadata=tuple(md.items()) or None, timeout=30)
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
                ok = False
            parts.append("%s=%d" % (host, code.value[0]))
        body = "%s %s [%s]\n" % (self.name, "ok" if ok else "fail", " ".join(parts))
        if not ok:
            ctx.abort(grpc.StatusCode.UNAVAILABLE, body)
        return body.encode()


def serve(name, listen, calls, forwarded, request_work, host_of, started, threads=64):
    """Serves until the process ends; started(port) is called once listening."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads))
    server.add_generic_rpc_handlers((Handler(name, calls, set(forwarded), request_work, host_of),))
    port = server.add_insecure_port(listen)
    if port == 0:
        raise SystemExit("%s: cannot listen on %s" % (name, listen))
    server.start()
    started(port)
    server.wait_for_termination()
