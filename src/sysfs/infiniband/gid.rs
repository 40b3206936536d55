//! GIDs (`ports/<n>/gids/<i>`, `gid_attrs/{types,ndevs}/<i>`): the addresses RoCE and IB traffic use.

use std::net::{IpAddr, Ipv6Addr};

use super::port_dir;
use crate::host::{Host, ReadError, ReadErrorKind};

pub fn gid_path(dev: &str, port: u32, index: u32) -> String {
    format!("{}/gids/{index}", port_dir(dev, port))
}

pub fn gid_type_path(dev: &str, port: u32, index: u32) -> String {
    format!("{}/gid_attrs/types/{index}", port_dir(dev, port))
}

/// A GID as sysfs prints it (`fe80:0000:…`); `None` for an empty slot (all zeros).
pub fn parse_gid(text: &str) -> Option<&str> {
    let gid = text.trim();
    let empty = gid.bytes().all(|b| b == b'0' || b == b':');
    (!gid.is_empty() && !empty).then_some(gid)
}

/// A file holding no value the kernel writes there.
fn garbled(path: String, text: &str) -> ReadError {
    ReadError {
        path,
        kind: ReadErrorKind::Other(format!("not a value the kernel writes: {:?}", text.trim())),
    }
}

/// `gids/<index>`; `None` for an empty slot (all zeros, or EINVAL as some kernels answer). Text that is not a
/// GID is the error.
pub fn read_gid(
    host: &Host,
    dev: &str,
    port: u32,
    index: u32,
) -> Result<Option<String>, ReadError> {
    let path = gid_path(dev, port, index);
    match host.read(&path) {
        Ok(text) => match parse_gid(&text) {
            Some(gid) if parse_gid_bytes(gid).is_none() => Err(garbled(path, &text)),
            gid => Ok(gid.map(str::to_string)),
        },
        Err(e) if e.kind == ReadErrorKind::InvalidArgument => Ok(None),
        Err(e) => Err(e),
    }
}

/// `0000:0000:0000:0000:0000:ffff:0a01:0203` → the 16 GID bytes (what a queue pair's address vector takes).
pub fn parse_gid_bytes(gid: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = gid.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut raw = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        let v = u16::from_str_radix(g, 16).ok()?;
        raw[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(raw)
}

/// `gid_attrs/types/<index>` (`RoCE v2`, `IB/RoCE v1`). An empty slot fails with EINVAL: that is `None`, as
/// is a missing file (recorded trees cannot record EINVAL). Any other text is the error.
pub fn read_gid_type(
    host: &Host,
    dev: &str,
    port: u32,
    index: u32,
) -> Result<Option<String>, ReadError> {
    let path = gid_type_path(dev, port, index);
    match empty_slot_is_none(host.read(&path))? {
        Some(t) if !["RoCE v2", "IB/RoCE v1"].contains(&t.trim()) => Err(garbled(path, &t)),
        t => Ok(t),
    }
}

/// `gid_attrs/ndevs/<index>`: the netdev carrying the GID; `None` when the slot has none.
pub fn read_gid_ndev(
    host: &Host,
    dev: &str,
    port: u32,
    index: u32,
) -> Result<Option<String>, ReadError> {
    empty_slot_is_none(host.read(&format!("{}/gid_attrs/ndevs/{index}", port_dir(dev, port))))
}

fn empty_slot_is_none(read: Result<String, ReadError>) -> Result<Option<String>, ReadError> {
    match read {
        Ok(s) if s.is_empty() => Ok(None),
        Ok(s) => Ok(Some(s)),
        Err(e)
            if matches!(
                e.kind,
                ReadErrorKind::InvalidArgument | ReadErrorKind::NotFound
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Indices present under `gids/`, ascending; none when there is no `gids/`. One that cannot be listed is the
/// error, never "no GID".
pub fn read_gid_indices(host: &Host, dev: &str, port: u32) -> Result<Vec<u32>, ReadError> {
    let names = crate::host::optional(host.read_dir(&format!("{}/gids", port_dir(dev, port))))?;
    let mut idx: Vec<u32> = names
        .unwrap_or_default()
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    idx.sort_unstable();
    Ok(idx)
}

/// `0000:0000:0000:0000:0000:ffff:0a01:0203` → `10.1.2.3`.
pub fn gid_ipv4(gid: &str) -> Option<String> {
    let groups: Vec<&str> = gid.split(':').collect();
    if groups.len() != 8 || groups[..5].iter().any(|g| *g != "0000") || groups[5] != "ffff" {
        return None;
    }
    let hi = u16::from_str_radix(groups[6], 16).ok()?;
    let lo = u16::from_str_radix(groups[7], 16).ok()?;
    Some(format!(
        "{}.{}.{}.{}",
        hi >> 8,
        hi & 0xff,
        lo >> 8,
        lo & 0xff
    ))
}

/// The port's RoCE v2 GID (index and bytes), an IPv4-mapped one first: what NCCL and perftest pick. `None`
/// when it has none; a GID slot that cannot be read is the error (it may be the one to pick).
pub fn roce_v2_gid(
    host: &Host,
    dev: &str,
    port: u32,
) -> Result<Option<(u32, [u8; 16])>, ReadError> {
    let mut found: Vec<(u32, String)> = Vec::new();
    for i in read_gid_indices(host, dev, port)? {
        let (Some(t), Some(gid)) = (
            read_gid_type(host, dev, port, i)?,
            read_gid(host, dev, port, i)?,
        ) else {
            continue;
        };
        if t == "RoCE v2" {
            found.push((i, gid));
        }
    }
    found.sort_by_key(|(i, gid)| (gid_ipv4(gid).is_none(), *i));
    Ok(found
        .into_iter()
        .find_map(|(i, gid)| parse_gid_bytes(&gid).map(|raw| (i, raw))))
}

pub fn gid_is_link_local(gid: &str) -> bool {
    gid.starts_with("fe80:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_bytes_parse() {
        let raw = parse_gid_bytes("0000:0000:0000:0000:0000:ffff:0a01:0203").unwrap();
        assert_eq!(&raw[10..], &[0xff, 0xff, 10, 1, 2, 3]);
        assert_eq!(parse_gid_bytes("1:2"), None);
    }

    #[test]
    fn gid_ipv4_mapped() {
        assert_eq!(
            gid_ipv4("0000:0000:0000:0000:0000:ffff:0a01:0203").as_deref(),
            Some("10.1.2.3")
        );
        assert_eq!(gid_ipv4("fe80:0000:0000:0000:0202:c9ff:fe00:0001"), None);
    }

    #[test]
    fn empty_gid_slot_einval_is_none() {
        let einval = ReadError {
            path: "/x".into(),
            kind: ReadErrorKind::InvalidArgument,
        };
        assert_eq!(empty_slot_is_none(Err(einval)), Ok(None));
        let denied = ReadError {
            path: "/x".into(),
            kind: ReadErrorKind::PermissionDenied,
        };
        assert!(empty_slot_is_none(Err(denied)).is_err());
    }

    #[test]
    fn gid_all_zero_is_empty_slot() {
        assert_eq!(parse_gid("0000:0000:0000:0000:0000:0000:0000:0000\n"), None);
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:0a01:0203"),
            Some("0000:0000:0000:0000:0000:ffff:0a01:0203")
        );
        assert_eq!(parse_gid(""), None);
    }
}

/// An IP address in a port's GID table (RoCE derives a GID from each address of the port's netdev), with the
/// netdev that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidAddr {
    pub ip: IpAddr,
    pub device: String,
    pub port: u32,
    pub ndev: Option<String>,
}

/// The IP addresses the GID tables of `ports` (`(device, port)`) carry: IPv4-mapped GIDs as IPv4, other
/// non-link-local GIDs as IPv6. A slot that cannot be read is the error (it may hold the address looked for).
pub fn read_gid_addresses(host: &Host, ports: &[(String, u32)]) -> Result<Vec<GidAddr>, ReadError> {
    let mut out: Vec<GidAddr> = Vec::new();
    for (dev, port) in ports {
        for i in read_gid_indices(host, dev, *port)? {
            let Some(gid) = read_gid(host, dev, *port, i)? else {
                continue;
            };
            let Some(raw) = parse_gid_bytes(&gid).filter(|_| !gid_is_link_local(&gid)) else {
                continue;
            };
            let v6 = Ipv6Addr::from(raw);
            let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
            if out
                .iter()
                .any(|a| a.ip == ip && &a.device == dev && a.port == *port)
            {
                continue;
            }
            out.push(GidAddr {
                ip,
                device: dev.clone(),
                port: *port,
                ndev: read_gid_ndev(host, dev, *port, i)?.map(|n| n.trim().to_string()),
            });
        }
    }
    Ok(out)
}
