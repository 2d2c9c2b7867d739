"""An uninstrumented gRPC service (Python grpcio, h2c) for rootline run's
tests, with the contract of grpcsvc/main.go and no tracing code:
LISTEN=host:port (default 127.0.0.1:0); CALL=host:port (optional
downstream). Every method is served by one generic handler (no generated
code: messages are raw bytes) on grpcio's thread pool. A leaf answers with
the trace metadata it received, one "name: value" line each; a middle
service calls CALL with the same method and message and answers with the
downstream's answer. The message is a command:

    fail        the leaf answers INTERNAL (a trailers-only response)
    sleep=MS    the leaf sleeps MS milliseconds first
    meta=N      a middle service adds N bytes of metadata to its call

A method whose name ends in "Stream" is server-streaming: the leaf sends
three messages, a middle service relays what its downstream sends. It prints
"listening <port>".
"""

import os
import time
from concurrent import futures

import grpc

ECHO = ("traceparent", "tracestate", "b3")


class Handler(grpc.GenericRpcHandler):
    def __init__(self, channel):
        self.channel = channel

    def service(self, details):
        method = details.method
        if method.endswith("Stream"):
            return grpc.unary_stream_rpc_method_handler(
                lambda req, ctx: self.stream(method, req, ctx))
        return grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: self.unary(method, req, ctx))

    def answer(self, method, req, ctx):
        msg = req.decode()
        if msg.startswith("sleep="):
            time.sleep(int(msg[len("sleep="):]) / 1000)
        if msg == "fail":
            ctx.abort(grpc.StatusCode.INTERNAL, "asked to fail")
        md = {}
        for k, v in ctx.invocation_metadata():
            md.setdefault(k, []).append(v)
        lines = ["path: %s\n" % method]
        lines += ["%s: %s\n" % (k, ",".join(md.get(k, []))) for k in ECHO]
        return "".join(lines).encode()

    def metadata(self, req):
        msg = req.decode()
        if msg.startswith("meta="):
            return (("x-big", "m" * int(msg[len("meta="):])),)
        return None

    def unary(self, method, req, ctx):
        if self.channel is None:
            return self.answer(method, req, ctx)
        try:
            return self.channel.unary_unary(method)(req, metadata=self.metadata(req), timeout=20)
        except grpc.RpcError as e:
            ctx.abort(e.code(), e.details() or "")

    def stream(self, method, req, ctx):
        if self.channel is None:
            out = self.answer(method, req, ctx)
            for _ in range(3):
                yield out
            return
        try:
            for out in self.channel.unary_stream(method)(req, metadata=self.metadata(req), timeout=20):
                yield out
        except grpc.RpcError as e:
            ctx.abort(e.code(), e.details() or "")


def main():
    call = os.environ.get("CALL")
    # Loopback calls never go through a proxy the environment names.
    channel = grpc.insecure_channel(call, options=[("grpc.enable_http_proxy", 0)]) if call else None
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((Handler(channel),))
    port = server.add_insecure_port(os.environ.get("LISTEN", "127.0.0.1:0"))
    server.start()
    print("listening %d" % port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
