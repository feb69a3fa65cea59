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

/// Every socket the network namespace of process `tgid` lists, by inode.
pub fn sockets_of(tgid: u32) -> HashMap<u64, String> {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/{tgid}/net/{name}")).unwrap_or_default()
    };
    let mut out = HashMap::new();
    for (file, proto) in [("tcp", "TCP"), ("tcp6", "TCP"), ("udp", "UDP"), ("udp6", "UDP")] {
        out.extend(parse_inet(&read(file), proto));
    }
    out.extend(parse_unix(&read("unix")));
    out
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
}
