"""An HTTP service instrumented with the OpenTelemetry Python SDK, for the
diagnosis test of an application Rootline does not run: it exports its
spans over OTLP/HTTP to the endpoint in OTEL_EXPORTER_OTLP_ENDPOINT and is
found by the agent through OTEL_SERVICE_NAME in its environment.

GET /work?ms=N spins N ms of CPU time on the serving thread. Each request is
one SERVER span carrying thread.id (the serving thread's kernel id), which
is what an SDK gives Rootline to join the span to the kernel's record of
that thread. Prints "listening PORT" once it accepts connections.
"""

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind


class ThreadID(SpanProcessor):
    """Sets the semantic convention's thread.id on every span at its start."""

    def on_start(self, span, parent_context=None):
        span.set_attribute("thread.id", threading.get_native_id())


provider = TracerProvider(resource=Resource.create({"process.pid": os.getpid()}))
provider.add_span_processor(ThreadID())
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=200))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("rootline.test.otelsdk")


def spin(ms):
    end = time.thread_time() + ms / 1000.0
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        url = urlparse(self.path)
        with tracer.start_as_current_span(
            "GET " + url.path,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "GET", "url.path": url.path},
        ) as span:
            ms = float(parse_qs(url.query).get("ms", ["0"])[0])
            spin(ms)
            body = b"ok\n"
            span.set_attribute("http.response.status_code", 200)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening", server.server_address[1], flush=True)
try:
    server.serve_forever()
finally:
    provider.shutdown()
    sys.stdout.flush()
