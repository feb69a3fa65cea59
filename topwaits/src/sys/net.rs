//! What a socket inode is, from a process's own network namespace tables
//! (`/proc/PID/net/{tcp,tcp6,udp,udp6,unix}`): its protocol, addresses and state,
//! or a Unix socket's path.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

/// TCP states as the kernel numbers them.
fn tcp_state(code: u8) -> &'static str {
    match code {
        0x01 => "established",
        0x02 => "syn-sent",
        0x03 => "syn-received",
        0x04 => "fin-wait-1",
        0x05 => "fin-wait-2",
        0x06 => "time-wait",
        0x07 => "closed",
        0x08 => "close-wait",
        0x09 => "last-ack",
        0x0a => "listening",
        0x0b => "closing",
        _ => "unknown state",
    }
}

/// `ADDR:PORT` in the tables' hex: IPv4 as one native-endian word, IPv6 as four.
fn address(hex: &str) -> Option<String> {
    let (a, p) = hex.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    match a.len() {
        8 => Some(format!(
            "{}:{port}",
            Ipv4Addr::from(u32::from_str_radix(a, 16).ok()?.swap_bytes())
        )),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                let w = u32::from_str_radix(&a[i * 8..i * 8 + 8], 16).ok()?.swap_bytes();
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
            }
            Some(format!("[{}]:{port}", Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// Sockets of a `tcp`/`udp` table by inode: "TCP 127.0.0.1:80, listening".
pub fn parse_inet(text: &str, proto: &str) -> HashMap<u64, String> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, remote) = (address(f.get(1)?)?, address(f.get(2)?)?);
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            let inode: u64 = f.get(9)?.parse().ok()?;
            let desc = match (proto, state) {
                ("TCP", 0x0a) => format!("TCP {local}, listening"),
                ("TCP", s) => format!("TCP {local} -> {remote}, {}", tcp_state(s)),
                (p, _) if remote.ends_with(":0") => format!("{p} {local}"),
                (p, _) => format!("{p} {local} -> {remote}"),
            };
            Some((inode, desc))
        })
        .collect()
}

/// Unix sockets by inode: "Unix /run/x.sock", or "Unix" when unnamed.
pub fn parse_unix(text: &str) -> HashMap<u64, String> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let inode: u64 = f.get(6)?.parse().ok()?;
            Some((
                inode,
                match f.get(7) {
                    Some(path) => format!("Unix {path}"),
                    None => "Unix".to_string(),
                },
            ))
        })
        .collect()
}

/// A namespace's tables, in the order [`Sockets::find`] reads them: Unix first,
/// as a process's own sockets often are and its table is the cheapest; the
/// kernel walks every bucket of its TCP hash for each `tcp` read.
const TABLES: [(&str, &str); 5] =
    [("unix", "Unix"), ("tcp", "TCP"), ("tcp6", "TCP"), ("udp", "UDP"), ("udp6", "UDP")];

fn table(tgid: u32, file: &str, proto: &str) -> HashMap<u64, String> {
    let text = std::fs::read_to_string(format!("/proc/{tgid}/net/{file}")).unwrap_or_default();
    if proto == "Unix" {
        parse_unix(&text)
    } else {
        parse_inet(&text, proto)
    }
}

/// One namespace's sockets, read a table at a time, as far as the inodes
/// looked up need.
#[derive(Default)]
struct Sockets {
    known: HashMap<u64, String>,
    /// How many of [`TABLES`] were read.
    read: usize,
}

impl Sockets {
    /// What socket `inode` is, reading through process `tgid` the tables not
    /// read yet until one lists it; None once all of them were read.
    fn find(&mut self, tgid: u32, inode: u64) -> Option<&String> {
        while !self.known.contains_key(&inode) && self.read_next(tgid) {}
        self.known.get(&inode)
    }

    /// Reads the next table; false when all were read.
    fn read_next(&mut self, tgid: u32) -> bool {
        let Some((file, proto)) = TABLES.get(self.read) else { return false };
        self.read += 1;
        for (inode, desc) in table(tgid, file, proto) {
            self.known.entry(inode).or_insert(desc);
        }
        true
    }
}

/// A network namespace by (`st_dev`, `st_ino`), or a process whose
/// namespace could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum NetNs {
    Id(u64, u64),
    OfProcess(u32),
}

/// Sockets as processes name them, read once per network namespace (the
/// processes of one namespace list the same tables), a table at a time, each
/// through the process whose lookup needed it (see [`Sockets`]).
#[derive(Default)]
pub struct ByNamespace {
    net_of: HashMap<u32, NetNs>,
    sockets: HashMap<NetNs, Sockets>,
    /// The namespaces whose tables were read again for a socket not found.
    read_again: std::collections::HashSet<NetNs>,
}

impl ByNamespace {
    /// What socket `inode` of process `tgid` is; its namespace's tables are
    /// read all again once for a socket made since they were read.
    pub fn describe(&mut self, tgid: u32, inode: u64) -> Option<String> {
        let ns =
            *self.net_of.entry(tgid).or_insert_with(|| {
                match crate::sys::procfs::namespace_id(tgid, "net") {
                    Some((dev, ino)) => NetNs::Id(dev, ino),
                    None => NetNs::OfProcess(tgid),
                }
            });
        let known = self.sockets.entry(ns).or_default();
        if let Some(s) = known.find(tgid, inode) {
            return Some(s.clone());
        }
        if !self.read_again.insert(ns) {
            return None;
        }
        *known = Sockets::default();
        known.find(tgid, inode).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:46A8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 145916 1 0000000000000000 100 0 0 10 0
   1: 0100007F:46A8 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 145999 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn tcp_listeners_and_connections() {
        let m = parse_inet(TCP, "TCP");
        assert_eq!(m[&145916], "TCP 127.0.0.1:18088, listening");
        assert_eq!(m[&145999], "TCP 127.0.0.1:18088 -> 127.0.0.1:50000, established");
        assert!(parse_inet("header\ngarbage line\n", "TCP").is_empty());
    }

    #[test]
    fn ipv6_and_udp() {
        let text = "h\n 0: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 07 0:0 0:0 0 0 0 77 2\n";
        assert_eq!(parse_inet(text, "UDP")[&77], "UDP [::1]:53");
    }

    #[test]
    fn unix_paths() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                    0000000000000000: 00000002 00000000 00010000 0001 01 21011 /run/systemd/notify\n\
                    0000000000000000: 00000003 00000000 00000000 0001 03 21500\n";
        let m = parse_unix(text);
        assert_eq!(m[&21011], "Unix /run/systemd/notify");
        assert_eq!(m[&21500], "Unix");
    }

    /// A socket's inode, as its descriptor's `socket:[N]` link names it.
    fn inode_of(fd: &impl std::os::fd::AsRawFd) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap().ino()
    }

    #[test]
    fn tables_are_read_as_far_as_a_lookup_needs() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let me = std::process::id();
        let mut s = Sockets::default();
        assert_eq!(s.find(me, inode_of(&a)).map(String::as_str), Some("Unix"));
        assert_eq!(s.read, 1, "a Unix socket is found in the first table");
        let tcp = s.find(me, inode_of(&listener)).cloned();
        assert_eq!(tcp, Some(format!("TCP 127.0.0.1:{port}, listening")));
        assert_eq!(s.read, 2);
        assert_eq!(s.find(me, u64::MAX), None);
        assert_eq!(s.read, TABLES.len());
        // Read again once for a socket made after its tables were read.
        let mut by_ns = ByNamespace::default();
        let first = by_ns.describe(me, inode_of(&listener));
        assert_eq!(first, Some(format!("TCP 127.0.0.1:{port}, listening")));
        let later = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = later.local_addr().unwrap().port();
        let want = format!("TCP 127.0.0.1:{port}, listening");
        assert_eq!(by_ns.describe(me, inode_of(&later)), Some(want));
        assert_eq!(by_ns.describe(me, u64::MAX), None);
        assert_eq!(by_ns.net_of.len(), 1);
    }
}
