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

/// The fields every version has, read first.
#[derive(serde::Deserialize)]
struct Header {
    format: String,
    version: u32,
    #[serde(default)]
    written_by: String,
}

#[derive(serde::Deserialize)]
struct FileIn {
    report: Report,
}

/// Writes a record file of `report`.
pub fn write(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    let file = FileOut { format: FORMAT, version: VERSION, written_by: env!("CARGO_PKG_VERSION"), report };
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

/// Reads a record file, or fails in one line saying why (not a record file, a
/// damaged one and where, or a version this topwaits does not read).
pub fn read(path: &Path) -> Result<Report> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let text = decompress(io::BufReader::new(file), size).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    parse(&text).with_context(|| format!("{}", path.display()))
}

/// The decompressed text of a record file of `size` bytes read from `input`.
fn decompress(mut input: impl io::BufRead, size: u64) -> Result<Vec<u8>> {
    let head = input.fill_buf().context("cannot read")?;
    if head.is_empty() {
        bail!("not a topwaits record file (it is empty)");
    }
    // A one-byte file that could begin a gzip stream is truncated, not foreign.
    if !GZIP_MAGIC.starts_with(&head[..head.len().min(2)]) {
        bail!("not a topwaits record file (not gzip-compressed)");
    }
    let mut counted = Counted { inner: input, read: 0 };
    let mut text = Vec::new();
    let got = flate2::read::MultiGzDecoder::new(&mut counted).read_to_end(&mut text);
    if let Err(e) = got {
        let how = if e.kind() == io::ErrorKind::UnexpectedEof { "truncated" } else { "corrupt" };
        // The decoder reads ahead in blocks: the damage lies at or before this byte.
        bail!("damaged record file: {how} (the gzip stream breaks by byte {} of {size}: {e})", counted.read);
    }
    Ok(text)
}

/// The report in a record file's decompressed text.
pub fn parse(text: &[u8]) -> Result<Report> {
    let header: Header = serde_json::from_slice(text).map_err(|_| anyhow!("not a topwaits record file"))?;
    if header.format != FORMAT {
        bail!("not a topwaits record file (format {:?})", header.format);
    }
    if header.version != VERSION {
        let by = if header.written_by.is_empty() { String::new() } else { format!(", written by topwaits {}", header.written_by) };
        bail!("record format version {}{by}: this topwaits ({}) reads version {VERSION} only", header.version, env!("CARGO_PKG_VERSION"));
    }
    let file: FileIn = serde_json::from_slice(text).context("damaged record file")?;
    Ok(file.report)
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
        assert_eq!((back.info.clock, back.info.start_mono, back.info.end_mono), (r.info.clock, r.info.start_mono, r.info.end_mono));
        assert_eq!((back.info.waker, back.info.by, &back.info.target), (r.info.waker, r.info.by, &r.info.target));
        // Every view renders the same from the copy.
        for out in [crate::cli::Output::Json { limit: 0 }, crate::cli::Output::Top { limit: 20, delimited: false }] {
            let f = crate::report::for_output(crate::cli::View::OffCpu, &out);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            f.write(&r, &mut a).unwrap();
            f.write(&back, &mut b).unwrap();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn other_files_and_versions_are_refused_in_one_line() {
        let e = parse(b"{\"format\": \"topwaits-record\", \"version\": 99, \"written_by\": \"9.0.0\"}").unwrap_err().to_string();
        assert!(e.contains("version 99") && e.contains("9.0.0") && e.contains("reads version 1"), "{e}");
        assert!(parse(b"{\"format\": \"pprof\", \"version\": 1}").unwrap_err().to_string().contains("not a topwaits record"));
        assert!(parse(b"hello").unwrap_err().to_string().contains("not a topwaits record"));
        let bad = parse(b"{\"format\": \"topwaits-record\", \"version\": 1, \"report\": {}}").unwrap_err();
        assert!(format!("{bad:#}").contains("damaged"), "{bad:#}");
        let dir = std::env::temp_dir().join(format!("tw-rec-{}", std::process::id()));
        std::fs::write(&dir, b"plain text").unwrap();
        let e = read(&dir).unwrap_err().to_string();
        let _ = std::fs::remove_file(&dir);
        assert!(e.contains("not gzip-compressed"), "{e}");
    }

    fn recorded() -> Vec<u8> {
        let mut buf = Vec::new();
        write(&offwake_report(), &mut buf).unwrap();
        buf
    }

    fn damage(bytes: &[u8]) -> String {
        format!("{:#}", decompress(bytes, bytes.len() as u64).and_then(|t| parse(&t)).unwrap_err())
    }

    /// Regression: a truncated or bit-flipped record said "not gzip-compressed".
    #[test]
    fn a_truncated_record_says_so_with_where_it_breaks() {
        let whole = recorded();
        for cut in [whole.len() - 1, whole.len() / 2, 12] {
            let e = damage(&whole[..cut]);
            assert!(e.contains("damaged record file: truncated") && e.contains(&format!("of {cut}")), "{cut}: {e}");
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
