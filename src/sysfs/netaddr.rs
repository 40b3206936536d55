//! The IP addresses this host's interfaces carry, from procfs (no netlink, so a recorded tree replays them):
//! IPv4 from the `LOCAL` leaves of `/proc/net/fib_trie`, IPv6 from `/proc/net/if_inet6`.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::host::{optional, Host, ReadError};

pub const FIB_TRIE: &str = "/proc/net/fib_trie";
pub const IF_INET6: &str = "/proc/net/if_inet6";

/// `|-- 10.0.0.5` followed by `/32 host LOCAL` marks an address of a local interface.
pub fn parse_fib_trie_local(text: &str) -> BTreeSet<Ipv4Addr> {
    let mut out = BTreeSet::new();
    let mut last_leaf: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(ip) = t.strip_prefix("|-- ") {
            last_leaf = ip.trim().parse().ok();
        } else if t.starts_with("/32 ") && t.ends_with("host LOCAL") {
            if let Some(ip) = last_leaf {
                out.insert(ip);
            }
        }
    }
    out
}

/// `fe800000000000000000000000000001 02 40 20 80 eth0`: the first field is the address, 32 hex digits.
pub fn parse_if_inet6(text: &str) -> BTreeSet<Ipv6Addr> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|hex| hex.len() == 32)
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(Ipv6Addr::from)
        .collect()
}

/// This host's IPv4 addresses. A missing file (no IPv4 in this network namespace) is none; an unreadable one,
/// or one that is not a FIB dump (no `Main:`/`Local:` table), is an error: an address list judged against
/// nothing read would blame addresses the host has.
pub fn read_local_ipv4(host: &Host) -> Result<BTreeSet<Ipv4Addr>, ReadError> {
    let Some(text) = optional(host.read(FIB_TRIE))? else {
        return Ok(BTreeSet::new());
    };
    let is_fib = text
        .lines()
        .any(|l| matches!(l.trim_end(), "Main:" | "Local:"));
    if !text.trim().is_empty() && !is_fib {
        return Err(ReadError::malformed(FIB_TRIE, "no Main: or Local: table"));
    }
    Ok(parse_fib_trie_local(&text))
}

/// Every local address, IPv4 and IPv6 (see [`read_local_ipv4`]; a missing `if_inet6` is a host without IPv6).
pub fn read_local_addresses(host: &Host) -> Result<BTreeSet<IpAddr>, ReadError> {
    let mut out: BTreeSet<IpAddr> = read_local_ipv4(host)?.into_iter().map(IpAddr::V4).collect();
    if let Some(t) = optional(host.read(IF_INET6))? {
        out.extend(parse_if_inet6(&t).into_iter().map(IpAddr::V6));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fib_trie_local_leaves_are_addresses() {
        let t = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 172.16.0.0/24 2 0 2\n        |-- 172.16.0.0\n           /24 link UNICAST\n        |-- 172.16.0.2\n           /32 host LOCAL\n        |-- 172.16.0.255\n           /32 link BROADCAST\n";
        let got = parse_fib_trie_local(t);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec!["172.16.0.2".parse::<Ipv4Addr>().unwrap()]
        );
    }

    #[test]
    fn unreadable_or_foreign_fib_trie_is_an_error_and_a_missing_one_is_no_address() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("proc/net")).unwrap();
        let host = Host::at(d.path()).unwrap();
        assert_eq!(read_local_addresses(&host), Ok(BTreeSet::new()));
        for garbage in [
            "garbage?\n",
            "\u{0}\u{1}",
            "|-- 10.0.0.5\n   /32 host LOCAL\n",
        ] {
            std::fs::write(d.path().join("proc/net/fib_trie"), garbage).unwrap();
            let host = Host::at(d.path()).unwrap();
            assert!(read_local_addresses(&host).is_err(), "{garbage:?}");
        }
        std::fs::write(
            d.path().join("proc/net/fib_trie"),
            "Main:\n  +-- 10.0.0.0/24 2 0 2\n     |-- 10.0.0.5\n        /32 host LOCAL\n",
        )
        .unwrap();
        std::fs::create_dir(d.path().join("proc/net/if_inet6")).unwrap();
        let host = Host::at(d.path()).unwrap();
        assert!(read_local_addresses(&host).is_err(), "if_inet6 a directory");
        std::fs::remove_dir(d.path().join("proc/net/if_inet6")).unwrap();
        let host = Host::at(d.path()).unwrap();
        assert_eq!(
            read_local_addresses(&host)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            ["10.0.0.5".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn if_inet6_addresses_parse() {
        let got = parse_if_inet6(
            "00000000000000000000000000000001 01 80 10 80       lo\nfe80000000000000b8e9d8fffe5b8e3c 02 40 20 80     eth0\nbad line\n",
        );
        assert!(got.contains(&"::1".parse().unwrap()));
        assert!(got.contains(&"fe80::b8e9:d8ff:fe5b:8e3c".parse().unwrap()));
        assert_eq!(got.len(), 2);
    }
}
