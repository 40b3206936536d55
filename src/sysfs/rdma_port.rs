//! What the GDR loopback needs to know about an RDMA port before it opens it: state, link layer, negotiated
//! rate, LID, the RoCE v2 GID, and where the device sits on the PCI tree (for GPU pairing).

use crate::host::Host;
use crate::sysfs::infiniband::CLASS_INFINIBAND;

/// `400 Gb/sec (4X NDR)`, `2.5 Gb/sec (1X SDR)`, `10 Gb/sec (4X)` → Gb/s.
pub fn parse_rate_gbps(text: &str) -> Option<f64> {
    let number = text.split_whitespace().next()?;
    let rest = text.trim_start().strip_prefix(number)?.trim_start();
    rest.starts_with("Gb/sec").then(|| number.parse().ok())?
}

/// `4: ACTIVE` → 4.
pub fn parse_state(text: &str) -> Option<u32> {
    text.split(':').next()?.trim().parse().ok()
}

/// `0x1a` → 26.
pub fn parse_hex_u16(text: &str) -> Option<u16> {
    u16::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

pub const PORT_ACTIVE: u32 = 4;

#[derive(Debug, Clone, PartialEq)]
pub struct PortInfo {
    pub device: String,
    pub port: u8,
    /// `4: ACTIVE` as read.
    pub state: Option<String>,
    /// `InfiniBand` / `Ethernet`.
    pub link_layer: Option<String>,
    pub rate: Option<String>,
    pub lid: Option<u16>,
}

impl PortInfo {
    pub fn is_active(&self) -> bool {
        self.state.as_deref().and_then(parse_state) == Some(PORT_ACTIVE)
    }
    pub fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
    pub fn rate_gbps(&self) -> Option<f64> {
        self.rate.as_deref().and_then(parse_rate_gbps)
    }
}

pub fn read_ports(host: &Host, device: &str) -> Vec<PortInfo> {
    let base = format!("{CLASS_INFINIBAND}/{device}/ports");
    let mut ports: Vec<PortInfo> = host
        .read_dir(&base)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| n.parse::<u8>().ok())
        .map(|port| {
            let attr = |name: &str| host.read(&format!("{base}/{port}/{name}")).ok();
            PortInfo {
                device: device.to_string(),
                port,
                state: attr("state"),
                link_layer: attr("link_layer"),
                rate: attr("rate"),
                lid: attr("lid").as_deref().and_then(parse_hex_u16),
            }
        })
        .collect();
    ports.sort_by_key(|p| p.port);
    ports
}

/// The index and value of the port's RoCE v2 GID, preferring an IPv4-mapped one (what NCCL and perftest pick
/// by default on RoCE). Empty slots read EINVAL: skipped.
pub fn roce_v2_gid(host: &Host, device: &str, port: u8) -> Option<(u32, String)> {
    let base = format!("{CLASS_INFINIBAND}/{device}/ports/{port}");
    let mut found: Vec<(u32, String)> = host
        .read_dir(&format!("{base}/gid_attrs/types"))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.parse::<u32>().ok())
        .filter(|i| {
            host.read(&format!("{base}/gid_attrs/types/{i}"))
                .is_ok_and(|t| t.trim() == "RoCE v2")
        })
        .filter_map(|i| {
            let gid = host.read(&format!("{base}/gids/{i}")).ok()?;
            (!is_zero_gid(&gid)).then_some((i, gid))
        })
        .collect();
    found.sort_by_key(|(i, gid)| (!is_ipv4_mapped(gid), *i));
    found.into_iter().next()
}

fn is_zero_gid(gid: &str) -> bool {
    gid.chars().all(|c| c == '0' || c == ':')
}

fn is_ipv4_mapped(gid: &str) -> bool {
    gid.starts_with("0000:0000:0000:0000:0000:ffff:")
}

/// `0000:0000:0000:0000:0000:ffff:0a01:0203` → 16 bytes.
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = text.trim().split(':').collect();
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

/// The canonical sysfs path of the RDMA device's PCI function (`/sys/devices/pci0000:16/…/0000:17:00.0`).
pub fn device_pci_path(host: &Host, device: &str) -> Option<String> {
    host.canonical(&format!("{CLASS_INFINIBAND}/{device}/device"))
        .ok()
}

/// `numa_node` of a PCI function given by its sysfs path; `-1` (unknown) is `None`.
pub fn numa_node(host: &Host, pci_path: &str) -> Option<u32> {
    host.read(&format!("{pci_path}/numa_node"))
        .ok()?
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_strings_parse() {
        assert_eq!(parse_rate_gbps("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(parse_rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(parse_rate_gbps("10 Gb/sec (4X)"), Some(10.0));
        assert_eq!(parse_rate_gbps("garbage"), None);
        assert_eq!(parse_rate_gbps(""), None);
    }

    #[test]
    fn state_and_lid_parse() {
        assert_eq!(parse_state("4: ACTIVE"), Some(4));
        assert_eq!(parse_hex_u16("0x1a"), Some(26));
        assert_eq!(parse_hex_u16("zz"), None);
    }

    #[test]
    fn gid_parses_and_v4_mapped_is_preferred() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sys/class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(p.join("gids")).unwrap();
        std::fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
        let slots = [
            ("0", "fe80:0000:0000:0000:0a00:27ff:fe00:0001", "IB/RoCE v1"),
            ("1", "fe80:0000:0000:0000:0a00:27ff:fe00:0001", "RoCE v2"),
            ("2", "0000:0000:0000:0000:0000:ffff:0a01:0203", "IB/RoCE v1"),
            ("3", "0000:0000:0000:0000:0000:ffff:0a01:0203", "RoCE v2"),
        ];
        for (i, gid, ty) in slots {
            std::fs::write(p.join("gids").join(i), gid).unwrap();
            std::fs::write(p.join("gid_attrs/types").join(i), ty).unwrap();
        }
        let host = Host::at(dir.path()).unwrap();
        let (idx, gid) = roce_v2_gid(&host, "mlx5_0", 1).unwrap();
        assert_eq!(idx, 3);
        let raw = parse_gid(&gid).unwrap();
        assert_eq!(&raw[12..], &[10, 1, 2, 3]);
        assert_eq!(parse_gid("1:2"), None);
    }
}
