//! Record files: a trace's symbolized report, saved by `topwaits record` and shown
//! again by `topwaits report`. The file is gzip-compressed JSON: `format`
//! ("topwaits-record"), `version` (this one writes and reads [`VERSION`]),
//! `written_by` (topwaits' version), and `report`: the trace's facts, counters,
//! records with their symbolized stacks, and each process's file mappings.

use std::io::{self, Read, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context as _, Result};

use crate::model::Report;

pub const FORMAT: &str = "topwaits-record";
/// Raised whenever what `report` holds changes shape.
pub const VERSION: u32 = 1;

#[derive(serde::Serialize)]
struct FileOut<'a> {
    format: &'static str,
    version: u32,
    written_by: &'static str,
    report: &'a Report,
}

pub use crate::settings::DEFAULT_MAX_RECORD_MIB as DEFAULT_MAX_MIB;

/// A record file as it is read: its fields in the order [`write`] puts them,
/// each checked as it arrives, so that a file that is no recording (or one of
/// another version) is refused at its first bytes, before anything else is read.
struct FileIn {
    report: Report,
}

impl<'de> serde::Deserialize<'de> for FileIn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FileVisitor)
    }
}

struct FileVisitor;

impl<'de> serde::de::Visitor<'de> for FileVisitor {
    type Value = FileIn;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a topwaits record file")
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<FileIn, M::Error> {
        use serde::de::Error as _;
        let (mut format_ok, mut version, mut written_by) = (false, None::<u32>, String::new());
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => {
                    let f: String = map.next_value()?;
                    if f != FORMAT {
                        return Err(M::Error::custom(format!("{NOT_RECORD} (format {f:?})")));
                    }
                    format_ok = true;
                }
                "version" => version = Some(map.next_value()?),
                "written_by" => written_by = map.next_value()?,
                "report" => {
                    if !format_ok {
                        return Err(M::Error::custom(NOT_RECORD));
                    }
                    match version {
                        Some(VERSION) => {}
                        Some(v) => {
                            let by = if written_by.is_empty() {
                                String::new()
                            } else {
                                format!(", written by topwaits {written_by}")
                            };
                            return Err(M::Error::custom(format!(
                                "record format version {v}{by}: this topwaits ({}) reads version {VERSION} only",
                                env!("CARGO_PKG_VERSION")
                            )));
                        }
                        None => return Err(M::Error::custom(NOT_RECORD)),
                    }
                    let report = map.next_value()?;
                    while map.next_key::<serde::de::IgnoredAny>()?.is_some() {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                    return Ok(FileIn { report });
                }
                _ if !format_ok => return Err(M::Error::custom(NOT_RECORD)),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        match (format_ok, version) {
            (true, Some(v)) if v != VERSION => Err(M::Error::custom(format!(
                "record format version {v}, written by topwaits {written_by}: this topwaits ({}) reads version {VERSION} only",
                env!("CARGO_PKG_VERSION")
            ))),
            (true, Some(_)) => Err(M::Error::custom(format!("{DAMAGED}: no report in it"))),
            _ => Err(M::Error::custom(NOT_RECORD)),
        }
    }
}

const NOT_RECORD: &str = "not a topwaits record file";
const DAMAGED: &str = "damaged record file";

/// Writes a record file of `report`.
pub fn write(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    let file =
        FileOut { format: FORMAT, version: VERSION, written_by: env!("CARGO_PKG_VERSION"), report };
    serde_json::to_writer(&mut gz, &file).map_err(io::Error::other)?;
    gz.finish()?;
    Ok(())
}

/// The gzip magic number every record file starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A reader that counts the bytes it hands on, to say where a damaged file broke.
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// Passes on at most `left` bytes, then fails: a file that expands past its
/// bound is refused when it crosses it, not after it has filled memory.
struct Bounded<R> {
    inner: R,
    left: u64,
    crossed: bool,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more than allowed tells a file of exactly the bound from a larger one.
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            self.crossed = true;
            return Err(io::Error::other("over the bound"));
        }
        let n = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let got = self.inner.read(&mut buf[..n])?;
        self.left -= got as u64;
        Ok(got)
    }
}

/// Reads a record file as a stream, or fails in one line saying why (not a
/// record file, a damaged one and where, a version this topwaits does not read,
/// or one larger than `max_mib` MiB, compressed or expanded).
pub fn read(path: &Path, max_mib: u64) -> Result<Report> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let max = max_mib.saturating_mul(1 << 20);
    if size > max {
        bail!("{}: {size} bytes, larger than the {max_mib} MiB a recording may take (raise it with --max-record-size)", path.display());
    }
    from_stream(io::BufReader::new(file), size, max_mib)
        .map_err(|e| anyhow!("{}: {e:#}", path.display()))
}

/// The report in a record file of `size` bytes read from `input`, expanding to
/// at most `max_mib` MiB.
fn from_stream(mut input: impl io::BufRead, size: u64, max_mib: u64) -> Result<Report> {
    let head = input.fill_buf().context("cannot read")?;
    if head.is_empty() {
        bail!("{NOT_RECORD} (it is empty)");
    }
    // A one-byte file that could begin a gzip stream is truncated, not foreign.
    if !GZIP_MAGIC.starts_with(&head[..head.len().min(2)]) {
        bail!("{NOT_RECORD} (not gzip-compressed)");
    }
    let mut counted = Counted { inner: input, read: 0 };
    let mut bounded = Bounded {
        inner: flate2::read::MultiGzDecoder::new(&mut counted),
        left: max_mib.saturating_mul(1 << 20),
        crossed: false,
    };
    let parsed =
        serde_json::from_reader::<_, FileIn>(io::BufReader::with_capacity(1 << 16, &mut bounded));
    let crossed = bounded.crossed;
    drop(bounded);
    match parsed {
        Ok(file) => Ok(file.report),
        Err(_) if crossed => {
            bail!("expands past {max_mib} MiB, the most a recording may take (raise it with --max-record-size)")
        }
        Err(e) if e.is_io() => {
            let how = if e.io_error_kind() == Some(io::ErrorKind::UnexpectedEof) {
                "truncated"
            } else {
                "corrupt"
            };
            // The decoder reads ahead in blocks: the damage lies at or before this byte.
            bail!(
                "{DAMAGED}: {how} (the gzip stream breaks by byte {} of {size}: {e})",
                counted.read
            )
        }
        Err(e) => Err(refusal(e)),
    }
}

/// A parse error as one line: the visitor's own words where it refused the
/// file, else the file is damaged (or no JSON at all: no recording).
fn refusal(e: serde_json::Error) -> anyhow::Error {
    let text = e.to_string();
    if text.starts_with(NOT_RECORD)
        || text.starts_with("record format version")
        || text.starts_with(DAMAGED)
    {
        anyhow!("{text}")
    } else if e.line() == 1 && e.column() <= 1 {
        anyhow!("{NOT_RECORD}")
    } else if e.is_eof() {
        anyhow!("{DAMAGED}: it ends early ({text})")
    } else if e.classify() == serde_json::error::Category::Syntax
        && e.line() == 1
        && e.column() < 16
    {
        anyhow!("{NOT_RECORD}")
    } else {
        anyhow!("{DAMAGED}: {text}")
    }
}

/// The report in a record file's decompressed text.
pub fn parse(text: &[u8]) -> Result<Report> {
    serde_json::from_slice::<FileIn>(text).map(|f| f.report).map_err(refusal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::offwake_report;

    fn round_trip(r: &Report) -> Report {
        let mut buf = Vec::new();
        write(r, &mut buf).unwrap();
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&buf[..]).read_to_end(&mut text).unwrap();
        parse(&text).unwrap()
    }

    #[test]
    fn a_report_comes_back_whole() {
        let mut r = offwake_report();
        r.records[0].open = Some(crate::model::OpenSince::Estimated(7));
        let back = round_trip(&r);
        assert_eq!(back.records, r.records);
        assert_eq!(back.counters, r.counters);
        assert_eq!(back.objects, r.objects);
        assert_eq!(
            (back.info.clock, back.info.start_mono, back.info.end_mono),
            (r.info.clock, r.info.start_mono, r.info.end_mono)
        );
        assert_eq!(
            (back.info.waker, back.info.by, &back.info.target),
            (r.info.waker, r.info.by, &r.info.target)
        );
        // Every view renders the same from the copy.
        for out in [
            crate::settings::Output::Json { limit: 0 },
            crate::settings::Output::Top { limit: 20, delimited: false },
        ] {
            let f = crate::report::for_output(crate::settings::View::OffCpu, &out);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            f.write(&r, &mut a).unwrap();
            f.write(&back, &mut b).unwrap();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn other_files_and_versions_are_refused_in_one_line() {
        let e =
            parse(b"{\"format\": \"topwaits-record\", \"version\": 99, \"written_by\": \"9.0.0\"}")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("version 99") && e.contains("9.0.0") && e.contains("reads version 1"),
            "{e}"
        );
        assert!(parse(b"{\"format\": \"pprof\", \"version\": 1}")
            .unwrap_err()
            .to_string()
            .contains("not a topwaits record"));
        assert!(parse(b"hello").unwrap_err().to_string().contains("not a topwaits record"));
        let bad = parse(b"{\"format\": \"topwaits-record\", \"version\": 1, \"report\": {}}")
            .unwrap_err();
        assert!(format!("{bad:#}").contains("damaged"), "{bad:#}");
        let dir = std::env::temp_dir().join(format!("tw-rec-{}", std::process::id()));
        std::fs::write(&dir, b"plain text").unwrap();
        let e = read(&dir, DEFAULT_MAX_MIB).unwrap_err().to_string();
        let _ = std::fs::remove_file(&dir);
        assert!(e.contains("not gzip-compressed"), "{e}");
    }

    fn recorded() -> Vec<u8> {
        let mut buf = Vec::new();
        write(&offwake_report(), &mut buf).unwrap();
        buf
    }

    fn damage(bytes: &[u8]) -> String {
        format!("{:#}", from_stream(bytes, bytes.len() as u64, DEFAULT_MAX_MIB).unwrap_err())
    }

    /// Regression: a truncated or bit-flipped record said "not gzip-compressed".
    #[test]
    fn a_truncated_record_says_so_with_where_it_breaks() {
        let whole = recorded();
        for cut in [whole.len() - 1, whole.len() / 2, 12] {
            let e = damage(&whole[..cut]);
            assert!(
                e.contains("damaged record file: truncated") && e.contains(&format!("of {cut}")),
                "{cut}: {e}"
            );
            assert!(!e.contains("not gzip") && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_flipped_bit_is_corrupt_not_a_foreign_file() {
        let whole = recorded();
        // In the compressed data, and in the checksum at the end.
        for at in [whole.len() / 3, whole.len() - 6] {
            let mut bad = whole.clone();
            bad[at] ^= 0x10;
            let e = damage(&bad);
            assert!(e.contains("damaged record file"), "byte {at}: {e}");
            assert!(!e.contains("not gzip"), "{e}");
        }
        assert!(damage(b"").contains("empty"));
        assert!(damage(b"\x1f").contains("truncated"));
        assert!(damage(b"\x1f\x00").contains("not gzip"));
    }
}
