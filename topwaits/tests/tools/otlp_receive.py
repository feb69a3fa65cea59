#!/usr/bin/env python3
"""An OTLP/HTTP profiles receiver for the serve tests.

Listens on 127.0.0.1:PORT and parses each POST to /v1development/profiles
with OpenTelemetry's own generated classes (PyPI opentelemetry-proto), so
that what topwaits sends is read by the schema's reference, not by its
encoder. Each request becomes one JSON line on stdout: per resource, its
attributes and, per profile, its sample type and its samples with their
values, attributes and function names (leaf first).

Usage: otlp_receive.py PORT [STATUS]   (STATUS answers every request, 200 by default)
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

PATH = "/v1development/profiles"


def any_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def summary(req):
    d = req.dictionary
    strings = list(d.string_table)
    assert strings and strings[0] == "", "string_table[0] must be the empty string"

    def attrs(indices):
        out = {}
        for i in indices:
            kv = d.attribute_table[i]
            out[strings[kv.key_strindex]] = any_value(kv.value)
        return out

    def frames(stack_index):
        names = []
        for li in d.stack_table[stack_index].location_indices:
            loc = d.location_table[li]
            for line in loc.lines:
                names.append(strings[d.function_table[line.function_index].name_strindex])
        return names

    resources = []
    for rp in req.resource_profiles:
        res = {kv.key: any_value(kv.value) for kv in rp.resource.attributes}
        profiles = []
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                profiles.append(
                    {
                        "type": strings[p.sample_type.type_strindex],
                        "unit": strings[p.sample_type.unit_strindex],
                        "time_unix_nano": p.time_unix_nano,
                        "duration_nano": p.duration_nano,
                        "samples": [
                            {"values": list(s.values), "attributes": attrs(s.attribute_indices), "frames": frames(s.stack_index)}
                            for s in p.samples
                        ],
                    }
                )
        resources.append({"resource": res, "profiles": profiles})
    return {"resources": resources}


class Handler(BaseHTTPRequestHandler):
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.status == 200:
            assert self.path == PATH, self.path
            assert self.headers.get("Content-Type") == "application/x-protobuf", self.headers.get("Content-Type")
            req = profiles_service_pb2.ExportProfilesServiceRequest()
            req.ParseFromString(body)
            print(json.dumps(summary(req)), flush=True)
        else:
            print(json.dumps({"refused": self.status}), flush=True)
        self.send_response(self.status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    Handler.status = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(json.dumps({"listening": server.server_port}), flush=True)
    server.serve_forever()
