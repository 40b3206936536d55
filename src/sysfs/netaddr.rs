//! The IP addresses this host's interfaces carry, from procfs (no netlink, so a recorded tree replays them):
//! IPv4 from the `LOCAL` leaves of `/proc/net/fib_trie`, IPv6 from `/proc/net/if_inet6`.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::host::Host;

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

/// Every local address; files that cannot be read contribute nothing (the caller shows which were read).
pub fn read_local_addresses(host: &Host) -> BTreeSet<IpAddr> {
    let mut out: BTreeSet<IpAddr> = BTreeSet::new();
    if let Ok(t) = host.read(FIB_TRIE) {
        out.extend(parse_fib_trie_local(&t).into_iter().map(IpAddr::V4));
    }
    if let Ok(t) = host.read(IF_INET6) {
        out.extend(parse_if_inet6(&t).into_iter().map(IpAddr::V6));
    }
    out
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
    fn if_inet6_addresses_parse() {
        let got = parse_if_inet6(
            "00000000000000000000000000000001 01 80 10 80       lo\nfe80000000000000b8e9d8fffe5b8e3c 02 40 20 80     eth0\nbad line\n",
        );
        assert!(got.contains(&"::1".parse().unwrap()));
        assert!(got.contains(&"fe80::b8e9:d8ff:fe5b:8e3c".parse().unwrap()));
        assert_eq!(got.len(), 2);
    }
}
