//! PCI configuration space (`/sys/bus/pci/devices/<bdf>/config`): the capability list from 0x34, the extended
//! capability list from 0x100, the PCI Express capability (port type, link) and ACS.
//!
//! The bytes come from outside: every pointer is checked (inside the file, outside the header, no loops).

use std::fmt;

use crate::host::{Host, ReadError};

/// Largest config space (PCIe extended).
pub const CONFIG_SPACE_MAX: u64 = 4096;
/// What a reader without CAP_SYS_ADMIN gets.
pub const HEADER_LEN: usize = 64;

const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 1 << 4;
const CAP_PTR: usize = 0x34;
const EXT_CAP_START: usize = 0x100;
const CAP_ID_PCIE: u8 = 0x10;
pub const EXT_CAP_ID_ACS: u16 = 0x000d;
/// The spec allows 48 capabilities in 192 bytes; more hops means a loop the visited set missed.
const MAX_CAPS: usize = 48;
const MAX_EXT_CAPS: usize = (4096 - 256) / 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Only the 64-byte header came back: the kernel hides the rest from processes without CAP_SYS_ADMIN.
    HeaderOnly,
    /// Fewer bytes than a header.
    Truncated(usize),
    /// A pointer into the header (< 0x40) or the extended area start, or not aligned.
    BadPointer {
        at: usize,
        pointer: usize,
    },
    /// A pointer past the end of what could be read.
    PointerOutOfRange {
        at: usize,
        pointer: usize,
        len: usize,
    },
    Loop {
        at: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::HeaderOnly => f.write_str(
                "only the 64-byte header is readable: reading capabilities needs root (CAP_SYS_ADMIN in the initial user namespace)",
            ),
            ConfigError::Truncated(n) => write!(f, "config space truncated to {n} bytes"),
            ConfigError::BadPointer { at, pointer } => {
                write!(f, "capability pointer 0x{pointer:x} at 0x{at:x} is invalid")
            }
            ConfigError::PointerOutOfRange { at, pointer, len } => write!(
                f,
                "capability pointer 0x{pointer:x} at 0x{at:x} is beyond the {len} bytes read"
            ),
            ConfigError::Loop { at } => write!(f, "capability list loops at 0x{at:x}"),
        }
    }
}

/// PCIe device/port type (PCI Express Capabilities register bits 7:4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortType {
    Endpoint,
    LegacyEndpoint,
    RootPort,
    SwitchUpstream,
    SwitchDownstream,
    PcieToPciBridge,
    PciToPcieBridge,
    RcIntegratedEndpoint,
    RcEventCollector,
    Other(u8),
}

impl PortType {
    fn from_bits(v: u8) -> PortType {
        match v {
            0 => PortType::Endpoint,
            1 => PortType::LegacyEndpoint,
            4 => PortType::RootPort,
            5 => PortType::SwitchUpstream,
            6 => PortType::SwitchDownstream,
            7 => PortType::PcieToPciBridge,
            8 => PortType::PciToPcieBridge,
            9 => PortType::RcIntegratedEndpoint,
            10 => PortType::RcEventCollector,
            n => PortType::Other(n),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PortType::Endpoint => "endpoint",
            PortType::LegacyEndpoint => "legacy endpoint",
            PortType::RootPort => "root port",
            PortType::SwitchUpstream => "switch upstream port",
            PortType::SwitchDownstream => "switch downstream port",
            PortType::PcieToPciBridge => "PCIe-to-PCI bridge",
            PortType::PciToPcieBridge => "PCI-to-PCIe bridge",
            PortType::RcIntegratedEndpoint => "root-complex integrated endpoint",
            PortType::RcEventCollector => "root-complex event collector",
            PortType::Other(_) => "unknown PCIe type",
        }
    }
}

/// The PCI Express capability's fields a preflight needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieCap {
    pub offset: usize,
    pub port_type: PortType,
    /// Link Capabilities: speed code (1 = 2.5 GT/s … 6 = 64 GT/s) and width.
    pub max_speed_code: u8,
    pub max_width: u8,
    /// Link Status.
    pub current_speed_code: u8,
    pub current_width: u8,
}

/// ACS extended capability: which controls exist and which are enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acs {
    pub offset: usize,
    pub capability: u16,
    pub control: u16,
}

/// ACS control bits that change where peer-to-peer traffic goes.
pub const ACS_BITS: &[(u16, &str)] = &[
    (1 << 0, "SrcValid"),
    (1 << 1, "TransBlk"),
    (1 << 2, "ReqRedir"),
    (1 << 3, "CmpltRedir"),
    (1 << 4, "UpstreamFwd"),
    (1 << 5, "EgressCtrl"),
    (1 << 6, "DirectTrans"),
];
/// Request Redirect, Completion Redirect, Egress Control: each sends peer traffic up to the root complex.
pub const ACS_REDIRECT_MASK: u16 = (1 << 2) | (1 << 3) | (1 << 5);

impl Acs {
    pub fn redirects(&self) -> bool {
        self.control & ACS_REDIRECT_MASK != 0
    }

    /// `SrcValid+ ReqRedir+ CmpltRedir- …` like lspci's `ACSCtl:` line (bits 0–6 only).
    pub fn control_names(&self) -> String {
        ACS_BITS
            .iter()
            .map(|(bit, name)| format!("{name}{}", if self.control & bit != 0 { '+' } else { '-' }))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A parsed config space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSpace {
    pub bytes: Vec<u8>,
}

impl ConfigSpace {
    /// Refuses what cannot hold capabilities: a header-only read (unprivileged) or a truncated file.
    pub fn new(bytes: Vec<u8>) -> Result<Self, ConfigError> {
        match bytes.len() {
            HEADER_LEN => Err(ConfigError::HeaderOnly),
            n if n < HEADER_LEN => Err(ConfigError::Truncated(n)),
            _ => Ok(ConfigSpace { bytes }),
        }
    }

    fn u8_at(&self, at: usize) -> Option<u8> {
        self.bytes.get(at).copied()
    }
    fn u16_at(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8_at(at)?, self.u8_at(at + 1)?]))
    }
    fn u32_at(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes([
            self.u8_at(at)?,
            self.u8_at(at + 1)?,
            self.u8_at(at + 2)?,
            self.u8_at(at + 3)?,
        ]))
    }

    pub fn vendor(&self) -> u16 {
        self.u16_at(0).unwrap_or(0xffff)
    }

    /// `(id, offset)` of each standard capability, in list order.
    pub fn capabilities(&self) -> Result<Vec<(u8, usize)>, ConfigError> {
        let status = self.u16_at(STATUS).unwrap_or(0);
        if status & STATUS_CAP_LIST == 0 {
            return Ok(Vec::new());
        }
        let mut caps = Vec::new();
        let mut at = CAP_PTR;
        let mut next = (self.u8_at(CAP_PTR).unwrap_or(0) & 0xfc) as usize;
        while next != 0 {
            if next < HEADER_LEN {
                return Err(ConfigError::BadPointer { at, pointer: next });
            }
            if next + 2 > self.bytes.len() {
                return Err(ConfigError::PointerOutOfRange {
                    at,
                    pointer: next,
                    len: self.bytes.len(),
                });
            }
            if caps.iter().any(|(_, o)| *o == next) || caps.len() >= MAX_CAPS {
                return Err(ConfigError::Loop { at: next });
            }
            caps.push((self.bytes[next], next));
            at = next + 1;
            next = (self.bytes[next + 1] & 0xfc) as usize;
        }
        Ok(caps)
    }

    /// `(id, offset)` of each extended capability. Empty for a 256-byte (conventional or virtual) config space.
    pub fn extended_capabilities(&self) -> Result<Vec<(u16, usize)>, ConfigError> {
        let mut caps = Vec::new();
        if self.bytes.len() < EXT_CAP_START + 4 {
            return Ok(caps);
        }
        let mut at = EXT_CAP_START;
        let mut next = EXT_CAP_START;
        loop {
            let Some(header) = self.u32_at(next) else {
                return Err(ConfigError::PointerOutOfRange {
                    at,
                    pointer: next,
                    len: self.bytes.len(),
                });
            };
            if header == 0 || header == 0xffff_ffff {
                // No extended capabilities at all (only valid at the start) or a dead entry.
                return Ok(caps);
            }
            if caps.iter().any(|(_, o)| *o == next) || caps.len() >= MAX_EXT_CAPS {
                return Err(ConfigError::Loop { at: next });
            }
            caps.push(((header & 0xffff) as u16, next));
            let following = (header >> 20) as usize;
            if following == 0 {
                return Ok(caps);
            }
            if following < EXT_CAP_START || !following.is_multiple_of(4) {
                return Err(ConfigError::BadPointer {
                    at: next,
                    pointer: following,
                });
            }
            at = next;
            next = following;
        }
    }

    pub fn pcie(&self) -> Result<Option<PcieCap>, ConfigError> {
        let Some(offset) = self
            .capabilities()?
            .into_iter()
            .find(|(id, _)| *id == CAP_ID_PCIE)
            .map(|(_, o)| o)
        else {
            return Ok(None);
        };
        let (Some(caps), Some(link_caps), Some(link_status)) = (
            self.u16_at(offset + 0x02),
            self.u32_at(offset + 0x0c),
            self.u16_at(offset + 0x12),
        ) else {
            return Err(ConfigError::PointerOutOfRange {
                at: CAP_PTR,
                pointer: offset,
                len: self.bytes.len(),
            });
        };
        Ok(Some(PcieCap {
            offset,
            port_type: PortType::from_bits(((caps >> 4) & 0xf) as u8),
            max_speed_code: (link_caps & 0xf) as u8,
            max_width: ((link_caps >> 4) & 0x3f) as u8,
            current_speed_code: (link_status & 0xf) as u8,
            current_width: ((link_status >> 4) & 0x3f) as u8,
        }))
    }

    pub fn acs(&self) -> Result<Option<Acs>, ConfigError> {
        let Some(offset) = self
            .extended_capabilities()?
            .into_iter()
            .find(|(id, _)| *id == EXT_CAP_ID_ACS)
            .map(|(_, o)| o)
        else {
            return Ok(None);
        };
        match (self.u16_at(offset + 4), self.u16_at(offset + 6)) {
            (Some(capability), Some(control)) => Ok(Some(Acs {
                offset,
                capability,
                control,
            })),
            _ => Err(ConfigError::PointerOutOfRange {
                at: offset,
                pointer: offset + 6,
                len: self.bytes.len(),
            }),
        }
    }
}

/// Why a config file gave no capabilities: the file could not be read, or its content is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigReadError {
    Read(ReadError),
    Parse(String, ConfigError),
}

impl fmt::Display for ConfigReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigReadError::Read(e) => e.fmt(f),
            ConfigReadError::Parse(path, e) => write!(f, "{path}: {e}"),
        }
    }
}

impl ConfigReadError {
    pub fn needs_root(&self) -> bool {
        matches!(
            self,
            ConfigReadError::Parse(_, ConfigError::HeaderOnly)
                | ConfigReadError::Read(ReadError {
                    kind: crate::host::ReadErrorKind::PermissionDenied,
                    ..
                })
        )
    }
}

pub fn read_config(host: &Host, bdf: &str) -> Result<ConfigSpace, ConfigReadError> {
    read_config_at(host, &super::pci::device_dir(bdf))
}

/// Config space of the function whose sysfs directory is `dir`.
pub fn read_config_at(host: &Host, dir: &str) -> Result<ConfigSpace, ConfigReadError> {
    let path = format!("{dir}/config");
    let bytes = host
        .read_bytes(&path, CONFIG_SPACE_MAX)
        .map_err(ConfigReadError::Read)?;
    ConfigSpace::new(bytes).map_err(|e| ConfigReadError::Parse(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4096-byte bridge config: PM at 0x40 → PCIe at 0x60; AER at 0x100 → ACS at 0x148.
    fn bridge(port_type: u8, acs_control: u16) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[0..2].copy_from_slice(&0x1000u16.to_le_bytes());
        b[STATUS..STATUS + 2].copy_from_slice(&STATUS_CAP_LIST.to_le_bytes());
        b[CAP_PTR] = 0x40;
        b[0x40] = 0x01;
        b[0x41] = 0x60;
        b[0x60] = CAP_ID_PCIE;
        b[0x61] = 0;
        b[0x62..0x64].copy_from_slice(&(2u16 | (u16::from(port_type) << 4)).to_le_bytes());
        b[0x6c..0x70].copy_from_slice(&(5u32 | (16 << 4)).to_le_bytes());
        b[0x72..0x74].copy_from_slice(&(5u16 | (8 << 4)).to_le_bytes());
        b[0x100..0x104].copy_from_slice(&(0x0001u32 | (2 << 16) | (0x148 << 20)).to_le_bytes());
        b[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
        b[0x14c..0x14e].copy_from_slice(&0x005fu16.to_le_bytes());
        b[0x14e..0x150].copy_from_slice(&acs_control.to_le_bytes());
        b
    }

    #[test]
    fn downstream_port_with_redirect_is_found() {
        let c = ConfigSpace::new(bridge(6, 0x001d)).unwrap();
        let pcie = c.pcie().unwrap().unwrap();
        assert_eq!(pcie.port_type, PortType::SwitchDownstream);
        assert_eq!((pcie.max_speed_code, pcie.max_width), (5, 16));
        assert_eq!((pcie.current_speed_code, pcie.current_width), (5, 8));
        let acs = c.acs().unwrap().unwrap();
        assert!(acs.redirects());
        assert_eq!(
            acs.control_names(),
            "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
        );
    }

    #[test]
    fn source_validation_only_is_not_a_redirect() {
        let c = ConfigSpace::new(bridge(6, 0x0001)).unwrap();
        assert!(!c.acs().unwrap().unwrap().redirects());
    }

    #[test]
    fn header_only_read_needs_root() {
        assert_eq!(
            ConfigSpace::new(vec![0; 64]).unwrap_err(),
            ConfigError::HeaderOnly
        );
        assert_eq!(
            ConfigSpace::new(vec![0; 10]).unwrap_err(),
            ConfigError::Truncated(10)
        );
    }

    #[test]
    fn capability_loop_is_an_error_not_a_hang() {
        let mut b = bridge(6, 0);
        b[0x61] = 0x40; // PCIe cap points back to PM
        let c = ConfigSpace::new(b).unwrap();
        assert_eq!(c.capabilities(), Err(ConfigError::Loop { at: 0x40 }));
    }

    #[test]
    fn pointer_into_header_is_refused() {
        let mut b = bridge(6, 0);
        b[0x41] = 0x10;
        assert!(matches!(
            ConfigSpace::new(b).unwrap().capabilities(),
            Err(ConfigError::BadPointer { pointer: 0x10, .. })
        ));
    }

    #[test]
    fn pointer_beyond_a_short_read_is_refused() {
        let mut b = bridge(6, 0);
        b.truncate(0x50); // PCIe cap at 0x60 no longer in the bytes
        assert!(matches!(
            ConfigSpace::new(b).unwrap().capabilities(),
            Err(ConfigError::PointerOutOfRange { pointer: 0x60, .. })
        ));
    }

    #[test]
    fn extended_loop_and_bad_pointer_are_errors() {
        let mut b = bridge(6, 0);
        b[0x148..0x14c].copy_from_slice(&(0x000du32 | (0x100 << 20)).to_le_bytes());
        assert!(matches!(
            ConfigSpace::new(b.clone()).unwrap().acs(),
            Err(ConfigError::Loop { .. })
        ));
        b[0x148..0x14c].copy_from_slice(&(0x000du32 | (0x40 << 20)).to_le_bytes());
        assert!(matches!(
            ConfigSpace::new(b).unwrap().acs(),
            Err(ConfigError::BadPointer { .. })
        ));
    }

    #[test]
    fn conventional_256_byte_space_has_no_extended_caps() {
        let mut b = bridge(0, 0);
        b.truncate(256);
        let c = ConfigSpace::new(b).unwrap();
        assert_eq!(c.extended_capabilities().unwrap(), vec![]);
        assert_eq!(c.acs().unwrap(), None);
        assert_eq!(c.pcie().unwrap().unwrap().port_type, PortType::Endpoint);
    }

    #[test]
    fn no_capability_list_bit_means_no_caps() {
        let mut b = bridge(6, 0);
        b[STATUS] = 0;
        assert_eq!(ConfigSpace::new(b).unwrap().capabilities().unwrap(), vec![]);
    }
}
