"""An OTLP/HTTP trace receiver on loopback, standing in for Langfuse's ingestion endpoint in tests.

Langfuse's SDK exports spans as protobuf `ExportTraceServiceRequest`s (gzipped or not) to
`{LANGFUSE_HOST}/api/public/otel/v1/traces` with HTTP basic auth; this decodes them with
`opentelemetry-proto` and keeps every span, flattened, with its resource and scope dropped.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

TRACES_PATH = "/api/public/otel/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str  # "" for none
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int

    def json(self, key: str) -> Any:
        """An attribute Langfuse stores as JSON text (usage, cost, an input that is not a
        string…), decoded; a string it sent as it is stays a string."""
        value = self.attributes.get(key)
        try:
            return json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError:
            return value


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    authorizations: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A running receiver; yields it with its base URL (what LANGFUSE_HOST is set to)."""
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans = [
                ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    attributes={kv.key: _value(kv.value) for kv in span.attributes},
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                )
                for resource in request.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            ]
            with receiver.lock:
                receiver.spans.extend(spans)
                receiver.paths.add(self.path)
                receiver.authorizations.add(self.headers.get("Authorization") or "")
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, name="otlp receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
