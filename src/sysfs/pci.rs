//! PCI device attributes: `/sys/bus/pci/devices/<bdf>/{class,vendor,device,*_link_*,numa_node}`.

use std::fmt;

use crate::host::{Host, ReadError};

pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";

pub const VENDOR_NVIDIA: u16 = 0x10de;
pub const VENDOR_MELLANOX: u16 = 0x15b3;

/// `DDDD:BB:DD.F`, the kernel's spelling (lower-case hex, 4-digit domain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl Bdf {
    /// `0000:18:00.0` (also the 8-digit domain nvidia-smi prints). None for anything else.
    pub fn parse(text: &str) -> Option<Bdf> {
        let (domain, rest) = text.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        let hex = |s: &str, max_len: usize| {
            (!s.is_empty() && s.len() <= max_len && s.chars().all(|c| c.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(s, 16).ok())
                .flatten()
        };
        let bdf = Bdf {
            domain: hex(domain, 8)?,
            bus: u8::try_from(hex(bus, 2)?).ok()?,
            device: u8::try_from(hex(device, 2)?).ok().filter(|d| *d < 32)?,
            function: u8::try_from(hex(function, 1)?).ok().filter(|f| *f < 8)?,
        };
        Some(bdf)
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// `current_link_speed` / `max_link_speed`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LinkSpeed {
    /// Transfer rate in GT/s (2.5, 5, 8, 16, 32, 64).
    GtPerSec(f64),
    /// `Unknown` (link down) or `Unknown speed` (kernel <= 5.6).
    Unknown,
}

impl LinkSpeed {
    /// PCIe generation for a known rate (2.5 → 1 … 64 → 6).
    pub fn generation(self) -> Option<u8> {
        let LinkSpeed::GtPerSec(gts) = self else {
            return None;
        };
        [2.5, 5.0, 8.0, 16.0, 32.0, 64.0]
            .iter()
            .position(|r| (gts - r).abs() < 0.01)
            .map(|i| i as u8 + 1)
    }

    pub fn gts(self) -> Option<f64> {
        match self {
            LinkSpeed::GtPerSec(g) => Some(g),
            LinkSpeed::Unknown => None,
        }
    }
}

impl fmt::Display for LinkSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkSpeed::GtPerSec(g) => write!(f, "{g:.1} GT/s"),
            LinkSpeed::Unknown => f.write_str("Unknown"),
        }
    }
}

/// `32.0 GT/s PCIe` (kernel >= 5.7), `32 GT/s` / `2.5 GT/s` (older), `Unknown`, `Unknown speed`.
pub fn parse_link_speed(text: &str) -> Option<LinkSpeed> {
    let text = text.trim();
    if text.starts_with("Unknown") {
        return Some(LinkSpeed::Unknown);
    }
    let number = text.strip_suffix(" PCIe").unwrap_or(text);
    let number = number.strip_suffix(" GT/s")?;
    let gts: f64 = number.trim().parse().ok()?;
    (gts.is_finite() && gts > 0.0).then_some(LinkSpeed::GtPerSec(gts))
}

/// One end's view of its link: what it runs at and the most it supports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkAttrs {
    pub current_speed: LinkSpeed,
    pub current_width: u32,
    pub max_speed: LinkSpeed,
    pub max_width: u32,
}

/// Where a device's link attributes came from, for evidence.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    Present(LinkAttrs),
    /// No `*_link_*` files: not a PCI Express function (virtio, many VFs). Not an error.
    Absent,
    /// Files exist but one could not be read or parsed: `(path, value or reason)`.
    Unreadable(String, String),
}

/// Attributes of one PCI function. Missing optional files are `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct PciAttrs {
    pub bdf: Bdf,
    /// 24-bit class code (`0x030200`).
    pub class: u32,
    pub vendor: u16,
    pub device: u16,
    /// `None` for `-1` (no affinity information) or a missing file.
    pub numa_node: Option<u32>,
    pub link: Link,
}

impl PciAttrs {
    /// 3D controller or VGA function of NVIDIA. NVSwitches (`0x068000`) share the vendor and are not GPUs.
    pub fn is_gpu(&self) -> bool {
        self.vendor == VENDOR_NVIDIA && (self.class >> 16) == 0x03
    }
    /// Ethernet or InfiniBand controller.
    pub fn is_network(&self) -> bool {
        (self.class >> 8) == 0x0200 || (self.class >> 8) == 0x0207
    }
    pub fn is_nvme(&self) -> bool {
        self.class == 0x010802
    }
    /// PCI-to-PCI bridge: root ports and switch ports.
    pub fn is_bridge(&self) -> bool {
        (self.class >> 8) == 0x0604
    }
}

pub fn device_dir(bdf: &str) -> String {
    format!("{PCI_DEVICES}/{bdf}")
}

/// `0x030200` → 0x030200; `0x10de` → 0x10de.
pub fn parse_hex(text: &str) -> Option<u32> {
    let t = text.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// `-1` → None (unknown), `0` → Some(0).
pub fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// BDFs under `/sys/bus/pci/devices`. A missing directory (no PCI bus, or a tree without it) is an empty list.
pub fn read_bdfs(host: &Host) -> Result<Vec<Bdf>, ReadError> {
    let names = match host.read_dir(PCI_DEVICES) {
        Ok(n) => n,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut bdfs: Vec<Bdf> = names.iter().filter_map(|n| Bdf::parse(n)).collect();
    bdfs.sort();
    Ok(bdfs)
}

/// Reads the attributes of one function from its sysfs directory `dir` (pass the canonical
/// `/sys/devices/...` path when known: it resolves without the `/sys/bus/pci/devices` symlink hop).
/// `class`, `vendor` and `device` are required; the rest is optional.
pub fn read_attrs(host: &Host, bdf: Bdf, dir: &str) -> Result<PciAttrs, ReadError> {
    let hex_file = |name: &str| read_hex(host, &format!("{dir}/{name}"));
    Ok(PciAttrs {
        bdf,
        class: hex_file("class")?,
        vendor: hex_file("vendor")? as u16,
        device: hex_file("device")? as u16,
        numa_node: read_numa_node(host, dir)?,
        link: read_link(host, dir),
    })
}

/// A hex attribute (`class`, `vendor`, `device`); a file holding anything else is an error.
pub fn read_hex(host: &Host, path: &str) -> Result<u32, ReadError> {
    let text = host.read(path)?;
    parse_hex(&text).ok_or_else(|| ReadError {
        path: path.to_string(),
        kind: crate::host::ReadErrorKind::Other(format!("not a hex number: {text:?}")),
    })
}

/// `numa_node` of the function whose sysfs directory is `dir`: None for `-1` (no affinity) or a missing file;
/// anything else unreadable or not a number is an error, not "no affinity".
pub fn read_numa_node(host: &Host, dir: &str) -> Result<Option<u32>, ReadError> {
    let path = format!("{dir}/numa_node");
    match crate::host::optional(host.read(&path))? {
        None => Ok(None),
        Some(text) if text.trim() == "-1" => Ok(None),
        Some(text) => parse_numa_node(&text).map(Some).ok_or_else(|| ReadError {
            path,
            kind: crate::host::ReadErrorKind::Other(format!("not a NUMA node: {text:?}")),
        }),
    }
}

fn read_link(host: &Host, dir: &str) -> Link {
    // Read once: its absence says the function has no link attributes at all.
    let current_speed_path = format!("{dir}/current_link_speed");
    let current_speed_text = match host.read(&current_speed_path) {
        Err(e) if e.is_not_found() => return Link::Absent,
        Err(e) => return Link::Unreadable(e.path.clone(), e.reason()),
        Ok(text) => text,
    };
    let parse_speed = |path: String, text: String| -> Result<LinkSpeed, (String, String)> {
        parse_link_speed(&text).ok_or((path, format!("<unrecognised: {text:?}>")))
    };
    let speed = |name: &str| -> Result<LinkSpeed, (String, String)> {
        let path = format!("{dir}/{name}");
        let text = host.read(&path).map_err(|e| (path.clone(), e.reason()))?;
        parse_speed(path, text)
    };
    let width = |name: &str| -> Result<u32, (String, String)> {
        let path = format!("{dir}/{name}");
        let text = host.read(&path).map_err(|e| (path.clone(), e.reason()))?;
        text.trim()
            .parse()
            .map_err(|_| (path, format!("<not a number: {text:?}>")))
    };
    let attrs = (|| {
        Ok::<_, (String, String)>(LinkAttrs {
            current_speed: parse_speed(current_speed_path, current_speed_text)?,
            current_width: width("current_link_width")?,
            max_speed: speed("max_link_speed")?,
            max_width: width("max_link_width")?,
        })
    })();
    match attrs {
        Ok(a) => Link::Present(a),
        Err((path, why)) => Link::Unreadable(path, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_round_trips_and_rejects_garbage() {
        let b = Bdf::parse("0000:18:00.0").unwrap();
        assert_eq!(b.bus, 0x18);
        assert_eq!(b.to_string(), "0000:18:00.0");
        assert_eq!(
            Bdf::parse("00000000:00:06.0").unwrap().to_string(),
            "0000:00:06.0"
        );
        for bad in [
            "pci0000:00",
            "0000:18:00",
            "0000:18:20.0",
            "0000:18:00.8",
            "x:y:z.1",
        ] {
            assert_eq!(Bdf::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn link_speed_every_kernel_form() {
        assert_eq!(
            parse_link_speed("32.0 GT/s PCIe"),
            Some(LinkSpeed::GtPerSec(32.0))
        );
        assert_eq!(parse_link_speed("32 GT/s"), Some(LinkSpeed::GtPerSec(32.0)));
        assert_eq!(parse_link_speed("2.5 GT/s"), Some(LinkSpeed::GtPerSec(2.5)));
        assert_eq!(parse_link_speed("Unknown"), Some(LinkSpeed::Unknown));
        assert_eq!(parse_link_speed("Unknown speed"), Some(LinkSpeed::Unknown));
        assert_eq!(parse_link_speed("fast"), None);
        assert_eq!(LinkSpeed::GtPerSec(32.0).generation(), Some(5));
        assert_eq!(LinkSpeed::GtPerSec(2.5).generation(), Some(1));
        assert_eq!(LinkSpeed::Unknown.generation(), None);
    }

    #[test]
    fn numa_minus_one_is_unknown() {
        assert_eq!(parse_numa_node("-1"), None);
        assert_eq!(parse_numa_node("1"), Some(1));
    }

    #[test]
    fn nvswitch_is_not_a_gpu() {
        let mut a = PciAttrs {
            bdf: Bdf::parse("0000:08:00.0").unwrap(),
            class: 0x068000,
            vendor: VENDOR_NVIDIA,
            device: 0x22a3,
            numa_node: None,
            link: Link::Absent,
        };
        assert!(!a.is_gpu());
        a.class = 0x030200;
        assert!(a.is_gpu());
    }
}
