// Decodes a gzip-compressed pprof profile with the pprof-format package (an
// independent reader of profile.proto) and prints it as JSON: sample types, and
// per sample its values, labels and frames (function name, mapping file, build id,
// address and file offset as decimal strings, exact at 64 bits).
const zlib = require('zlib');
const fs = require('fs');
const { Profile } = require(process.argv[2] + '/node_modules/pprof-format');
const p = Profile.decode(zlib.gunzipSync(fs.readFileSync(process.argv[3])));
const s = (i) => p.stringTable.strings[Number(i)];
const big = (v) => BigInt(v);
const byId = (list) => new Map(list.map((x) => [String(x.id), x]));
const locs = byId(p.location), maps = byId(p.mapping), fns = byId(p.function);
console.log(JSON.stringify({
  sample_types: p.sampleType.map((t) => [s(t.type), s(t.unit)]),
  default_sample_type: s(p.defaultSampleType),
  duration_nanos: String(p.durationNanos),
  samples: p.sample.map((sm) => ({
    values: sm.value.map(String),
    labels: Object.fromEntries(sm.label.map((l) => [s(l.key), Number(l.str) ? s(l.str) : String(l.num)])),
    frames: sm.locationId.map((id) => {
      const loc = locs.get(String(id));
      const m = maps.get(String(loc.mappingId));
      const fn = loc.line.length ? fns.get(String(loc.line[0].functionId)) : null;
      return {
        addr: String(loc.address),
        name: fn ? s(fn.name) : null,
        file: m ? s(m.filename) : null,
        build_id: m ? s(m.buildId) : null,
        file_offset: m ? String(big(loc.address) - big(m.memoryStart) + big(m.fileOffset)) : null,
      };
    }),
  })),
}));
