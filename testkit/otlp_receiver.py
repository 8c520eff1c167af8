#!/usr/bin/env python3
"""A test OTLP/HTTP trace receiver that decodes with the OFFICIAL
OpenTelemetry protobuf definitions (the `opentelemetry-proto` package), not
with the exporter's own structs.

    otlp_receiver.py --out FILE [--mode normal|blackhole|big]

Listens on 127.0.0.1:0 and prints the port on its first stdout line. Every
POST appends one JSON line {"type":"post",...} to FILE, then (mode normal)
one {"type":"span",...} line per span decoded. Modes: normal answers 200 with
an empty ExportTraceServiceResponse; blackhole reads the request and never
answers; big answers 200 with a 64 MB body and records (a
`reply` line) how much of it went out.
"""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

LOCK = threading.Lock()


def any_value(v):
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value"):
        return str(getattr(v, which))
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def attrs(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        lines = []
        spans = []
        error = None
        try:
            req = trace_service_pb2.ExportTraceServiceRequest()
            req.ParseFromString(body)
            for rs in req.resource_spans:
                res = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        spans.append({
                            "type": "span",
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "trace_state": s.trace_state,
                            "name": s.name,
                            "kind": trace_pb2.Span.SpanKind.Name(s.kind),
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "attributes": attrs(s.attributes),
                            "events": [{"name": e.name, "attributes": attrs(e.attributes)} for e in s.events],
                            "status": {
                                "code": trace_pb2.Status.StatusCode.Name(s.status.code),
                                "message": s.status.message,
                            },
                            "service_name": res.get("service.name"),
                            "resource": res,
                            "scope": {"name": ss.scope.name, "version": ss.scope.version},
                        })
        except Exception as e:  # a decode failure is a test failure: report it
            error = repr(e)
        lines.append({
            "type": "post",
            "path": self.path,
            "content_type": self.headers.get("Content-Type"),
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "bytes": len(body),
            "spans": len(spans),
            "error": error,
        })
        lines.extend(spans)
        with LOCK, open(ARGS.out, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        if ARGS.mode == "blackhole":
            time.sleep(3600)
            return
        if ARGS.mode == "big":
            # 64 MB: more than loopback's socket buffers hold (about 10 MB
            # on both ends), so the body is delivered whole only to a client
            # that reads it; one that closes early makes a write fail.
            size = 64 * 1024 * 1024
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"\0" * 65536
            sent = 0
            try:
                for _ in range(size // len(chunk)):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    sent += len(chunk)
            except OSError:
                pass
            with LOCK, open(ARGS.out, "a") as f:
                f.write(json.dumps({"type": "reply", "sent": sent, "whole": sent == size}) + "\n")
            return
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200 if error is None else 400)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


class Server(ThreadingHTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="normal", choices=["normal", "blackhole", "big"])
    ARGS = p.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
