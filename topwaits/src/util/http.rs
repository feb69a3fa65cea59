//! The little HTTP/1.1 that `topwaits serve` speaks: a request line and headers
//! read from a connection, a response written with its length, and a POST to
//! a receiver (OTLP). Plain HTTP only: a fleet's collector or agent listens on
//! the machine or its pod, where TLS is for it to add. Pure parsing, tested on
//! bytes; the sockets are the caller's.

use std::io::{self, BufRead, Read, Write};
use std::time::Duration;

/// What a request asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path, without its query.
    pub path: String,
    /// The query's `key=value` pairs, in order (not percent-decoded: the
    /// parameters topwaits reads are plain numbers).
    pub query: Vec<(String, String)>,
}

impl Request {
    /// The value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// The longest request head read (line and headers): scrapers send a few hundred bytes.
const MAX_HEAD: usize = 16 << 10;

/// Reads a request's line and headers (a body, which GET has none of, is not
/// read). Errors say what was wrong, for a 400.
pub fn read_request(r: &mut impl BufRead) -> io::Result<Request> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let mut line = String::new();
    let mut head = 0usize;
    r.by_ref().take(MAX_HEAD as u64).read_line(&mut line)?;
    head += line.len();
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("not an HTTP request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad("only HTTP/1.x is spoken here"));
    }
    // The headers, up to the blank line; none of them matters here.
    loop {
        let mut h = String::new();
        let n = r.by_ref().take((MAX_HEAD - head.min(MAX_HEAD)) as u64).read_line(&mut h)?;
        head += n;
        if n == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if head >= MAX_HEAD {
            return Err(bad("request headers too long"));
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    Ok(Request { method: method.into(), path: path.into(), query })
}

/// Writes a whole response and its body.
pub fn respond(
    w: &mut impl Write,
    status: u16,
    content_type: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Error",
    };
    write!(w, "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len())?;
    for (k, v) in extra {
        write!(w, "{k}: {v}\r\n")?;
    }
    w.write_all(b"\r\n")?;
    w.write_all(body)?;
    w.flush()
}

/// Where to send: a plain-HTTP URL's host, port and path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

/// Parses `http://host[:port][/path]`; `default_path` where it has none.
pub fn parse_url(s: &str, default_path: &str) -> Result<Url, String> {
    let rest = match s.split_once("://") {
        Some(("http", rest)) => rest,
        Some(("https", _)) => {
            return Err(format!("{s}: https is not spoken; point it at a collector on this machine or in this pod over http"))
        }
        Some((scheme, _)) => return Err(format!("{s}: {scheme} is no URL scheme topwaits speaks (http)")),
        None => return Err(format!("{s}: not a URL (http://host:port/path)")),
    };
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse::<u16>().map_err(|_| format!("{s}: {p} is no port"))?,
        ),
        _ => (hostport.trim_start_matches('[').trim_end_matches(']'), 80),
    };
    if host.is_empty() {
        return Err(format!("{s}: no host"));
    }
    let path = if path.is_empty() || path == "/" { default_path } else { path };
    Ok(Url { host: host.into(), port, path: path.into() })
}

/// POSTs `body` to `url` and returns the response's status. Each step of the
/// exchange waits at most `timeout`.
pub fn post(url: &Url, content_type: &str, body: &[u8], timeout: Duration) -> io::Result<u16> {
    use std::net::ToSocketAddrs;
    let addr = (url.host.as_str(), url.port).to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("{} resolves to no address", url.host))
    })?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        url.path,
        url.host,
        url.port,
        body.len()
    )?;
    s.write_all(body)?;
    let mut status = String::new();
    io::BufReader::new(s).take(1024).read_line(&mut status)?;
    status.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, format!("no HTTP status in {status:?}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrapers_request_is_read_with_its_query() {
        let raw = b"GET /debug/pprof/offcpu?seconds=5&x=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: Go\r\n\r\nignored";
        let r = read_request(&mut &raw[..]).unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/debug/pprof/offcpu"));
        assert_eq!((r.param("seconds"), r.param("x"), r.param("y")), (Some("5"), Some("1"), None));
        let r = read_request(&mut &b"GET /metrics HTTP/1.0\n\n"[..]).unwrap();
        assert!(r.query.is_empty() && r.path == "/metrics");
    }

    #[test]
    fn what_is_not_http_is_an_error_not_a_panic() {
        for raw in [&b""[..], b"hello\r\n\r\n", b"GET / SPDY/3\r\n\r\n", b"GET\r\n"] {
            assert!(read_request(&mut &raw[..]).is_err(), "{:?}", String::from_utf8_lossy(raw));
        }
        let mut long = b"GET / HTTP/1.1\r\n".to_vec();
        long.extend(std::iter::repeat_n(b"X-A: b\r\n".to_vec(), 4000).flatten());
        assert!(read_request(&mut &long[..]).is_err(), "headers without end");
    }

    #[test]
    fn a_response_carries_its_length_and_closes() {
        let mut out = Vec::new();
        respond(&mut out, 200, "text/plain", &[("Content-Encoding", "gzip")], b"hi").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.contains("Content-Length: 2\r\n")
                && text.contains("Connection: close\r\n")
                && text.contains("Content-Encoding: gzip\r\n")
        );
        assert!(text.ends_with("\r\n\r\nhi"));
    }

    #[test]
    fn urls_are_parsed_or_refused_in_one_line() {
        let u = parse_url("http://127.0.0.1:4318/v1development/profiles", "/x").unwrap();
        assert_eq!(
            u,
            Url { host: "127.0.0.1".into(), port: 4318, path: "/v1development/profiles".into() }
        );
        assert_eq!(
            parse_url("http://collector:4318", "/v1development/profiles").unwrap().path,
            "/v1development/profiles"
        );
        assert_eq!(parse_url("http://collector/", "/p").unwrap().port, 80);
        assert_eq!(parse_url("http://[::1]:9/p", "/").unwrap().host, "::1");
        for bad in ["https://x:1/", "ftp://x/", "collector:4318", "http://:9/", "http://x:99999/"] {
            let e = parse_url(bad, "/").unwrap_err();
            assert!(!e.contains('\n') && e.starts_with(bad), "{e}");
        }
    }
}
