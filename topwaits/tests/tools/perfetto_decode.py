"""Decodes a Perfetto trace with Perfetto's own schema (the perfetto package's
perfetto_trace_pb2, read by Google's protobuf) and prints it as JSON: the thread
tracks, the other named tracks (a goroutine's), and every track event with its timestamp, type, track, name, flows and
annotations."""
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

trace = pb.Trace()
with open(sys.argv[1], "rb") as f:
    trace.ParseFromString(f.read())
threads, named, events = {}, {}, []
for p in trace.packet:
    if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread"):
        d = p.track_descriptor
        threads[str(d.uuid)] = {"tid": d.thread.tid, "pid": d.thread.pid, "name": d.thread.thread_name}
    elif p.HasField("track_descriptor") and p.track_descriptor.HasField("name"):
        d = p.track_descriptor
        named[str(d.uuid)] = {"name": d.name, "parent": str(d.parent_uuid)}
    if p.HasField("track_event"):
        e = p.track_event
        notes = {a.name: (a.string_value if a.HasField("string_value") else a.uint_value) for a in e.debug_annotations}
        events.append({
            "ts": str(p.timestamp),
            "clock": p.timestamp_clock_id,
            "type": pb.TrackEvent.Type.Name(e.type),
            "track": str(e.track_uuid),
            "name": e.name,
            "flows": [str(i) for i in e.flow_ids],
            "ends_flows": [str(i) for i in e.terminating_flow_ids],
            "notes": notes,
        })
print(json.dumps({"threads": threads, "tracks": named, "events": events}))
