//! AWS Elastic Fabric Adapter: which PCI functions are EFAs, their RDMA devices, the ENA netdev of the same
//! interface, the peer-memory attribute and the `hw_counters`. No verdicts here.
//!
//! Sources: kernel `drivers/infiniband/hw/efa/` (port always ACTIVE/LinkUp, `link_layer` Unknown, the rate mapped
//! from the device's link speed by `efa_link_gbps_to_speed_and_width`, `EFA_DEFINE_PORT_STATS` /
//! `EFA_DEFINE_DEVICE_STATS`, the GID copied from the device's address, no netdev); rdma-core
//! `providers/efa/efa.c` (`efa_table`: 1d0f:efa0–efa3; efa4 in amzn-drivers' newer table); amzn-drivers
//! `efa_sysfs.c` (`gdr` reading `1`, later `p2p` reading the peer provider's name, on the PCI function).

use crate::host::{optional, Host, ReadError, ReadErrorKind, ReadResult};
use crate::sysfs::infiniband::{self, Rate};
use crate::sysfs::net::CLASS_NET;
use crate::sysfs::pci::{self, Bdf};

pub const VENDOR_AMAZON: u16 = 0x1d0f;
/// EFA device ids (rdma-core `efa_table`; 0xefa4 from amzn-drivers).
pub const EFA_DEVICE_IDS: [u16; 5] = [0xefa0, 0xefa1, 0xefa2, 0xefa3, 0xefa4];
/// The PCI driver that registers EFA RDMA devices.
pub const EFA_DRIVER: &str = "efa";
/// The out-of-tree driver's module that lends it NVIDIA's peer-memory API.
pub const NV_PEERMEM_MODULE: &str = "efa_nv_peermem";

/// Port-level counters that count faults (kernel `EFA_DEFINE_PORT_STATS`; AWS's EKS node agent watches the same).
pub const PORT_ERROR_COUNTERS: [&str; 6] = [
    "rx_drops",
    "rdma_read_wr_err",
    "rdma_write_wr_err",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
];
/// Device-level counters that count faults: admin commands that failed or never completed, and every `*_err`.
pub fn is_device_error_counter(name: &str) -> bool {
    name == "cmds_err" || name == "no_completion_cmds" || name.ends_with("_err")
}

pub fn is_efa(vendor: u16, device: u16) -> bool {
    vendor == VENDOR_AMAZON && EFA_DEVICE_IDS.contains(&device)
}

/// One EFA PCI function as sysfs shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct EfaFunction {
    pub bdf: String,
    pub device_id: u16,
    /// The bound PCI driver (`efa`), None when none is.
    pub driver: Option<String>,
    /// RDMA devices whose `device` link points here (`rdmap79s0`).
    pub rdma_devices: Vec<String>,
}

impl EfaFunction {
    /// Bound to the efa driver: its `driver` link says so, or (no link, as in a recorded tree or a container's
    /// sysfs) an RDMA device is registered on it, which only the efa driver does. The presence rule reads an
    /// RDMA child the same way for ConnectX (`presence.rs`).
    pub fn has_efa_driver(&self) -> bool {
        match &self.driver {
            Some(d) => d == EFA_DRIVER,
            None => !self.rdma_devices.is_empty(),
        }
    }

    /// The driver as evidence shows it: the link's target, or why it is taken as bound without one.
    pub fn driver_evidence(&self) -> String {
        match &self.driver {
            Some(d) => d.clone(),
            None if self.has_efa_driver() => {
                "<no link> (efa in effect: it registered an RDMA device)".into()
            }
            None => "<none>".into(),
        }
    }
}

/// The amzn driver's peer-memory attribute on an EFA function: (`p2p` or `gdr`, its value), None when neither
/// exists (the in-tree driver).
pub fn read_peer_attribute(host: &Host, bdf: &str) -> ReadResult<Option<(String, String)>> {
    let dir = pci::device_dir(bdf);
    for attr in ["p2p", "gdr"] {
        // `p2p` reads an empty line when no peer provider is there: an answer, not an unreadable file.
        if let Some(v) = optional(host.read(&format!("{dir}/{attr}")))? {
            return Ok(Some((attr.to_string(), v.trim().to_string())));
        }
    }
    Ok(None)
}

/// The amzn efa driver's own GPU peer-memory path, in words; None where it reports none. Its `p2p` attribute,
/// where present, is the driver's live answer, read as libfabric's efa provider reads it (`NVIDIA…`: `NVIDIA`
/// calls nvidia_p2p_* directly, `NVIDIA peermem` through efa_nv_peermem; empty = no provider; `NEURON` is
/// Trainium's); the older `gdr` reads 1; without either attribute, a loaded efa_nv_peermem.
pub fn nvidia_peer_path(attribute: Option<&(String, String)>, nv_peermem: bool) -> Option<String> {
    match attribute {
        Some((attr, v)) if attr == "p2p" && v.starts_with("NVIDIA") => {
            Some(format!("amzn efa peer memory (p2p provider {v:?})"))
        }
        Some((attr, v)) if attr == "gdr" && v == "1" => {
            Some("amzn efa peer memory (gdr = 1)".into())
        }
        None if nv_peermem => Some(format!("amzn efa peer memory ({NV_PEERMEM_MODULE} loaded)")),
        _ => None,
    }
}

/// The first peer-memory attribute among the EFA functions that registered an RDMA device, as (the function's
/// attribute path, (name, value)); None where none has one (the in-tree driver).
pub fn first_peer_attribute(
    host: &Host,
    functions: &[EfaFunction],
) -> ReadResult<Option<(String, (String, String))>> {
    for f in functions.iter().filter(|f| !f.rdma_devices.is_empty()) {
        if let Some(a) = read_peer_attribute(host, &f.bdf)? {
            return Ok(Some((format!("{}/{}", pci::device_dir(&f.bdf), a.0), a)));
        }
    }
    Ok(None)
}

/// Every EFA function on the bus with what is bound to it. An unreadable bus or RDMA class is the error.
/// Read once per host and shared: five checks of a run ask, and each read visits every function on the bus.
pub fn read_functions(host: &Host) -> ReadResult<Vec<EfaFunction>> {
    struct Functions(ReadResult<Vec<EfaFunction>>);
    host.shared(|h| Functions(scan_functions(h))).0.clone()
}

fn scan_functions(host: &Host) -> ReadResult<Vec<EfaFunction>> {
    let mut rdma_by_bdf: Vec<(String, String)> = Vec::new();
    for name in infiniband::read_device_names(host)? {
        if let Some(bdf) = infiniband::device_bdf(host, &name)? {
            rdma_by_bdf.push((bdf, name));
        }
    }
    let mut out = Vec::new();
    for bdf in pci::read_bdfs(host)? {
        let dir = pci::device_dir(&bdf.to_string());
        let vendor = pci::read_hex(host, &format!("{dir}/vendor"))? as u16;
        let device = pci::read_hex(host, &format!("{dir}/device"))? as u16;
        if !is_efa(vendor, device) {
            continue;
        }
        out.push(read_function(host, bdf, device, &rdma_by_bdf)?);
    }
    Ok(out)
}

/// The RDMA devices of every EFA function on the bus (`rdmap16s27`, `efa_0`), for the checks that read each.
pub fn read_rdma_devices(host: &Host) -> ReadResult<Vec<String>> {
    Ok(read_functions(host)?
        .into_iter()
        .flat_map(|f| f.rdma_devices)
        .collect())
}

fn read_function(
    host: &Host,
    bdf: Bdf,
    device_id: u16,
    rdma_by_bdf: &[(String, String)],
) -> ReadResult<EfaFunction> {
    let bdf = bdf.to_string();
    let dir = pci::device_dir(&bdf);
    let driver = optional(host.read_link(&format!("{dir}/driver")))?
        .and_then(|t| t.rsplit('/').next().map(str::to_string));
    let mut rdma_devices: Vec<String> = rdma_by_bdf
        .iter()
        .filter(|(b, _)| *b == bdf)
        .map(|(_, n)| n.clone())
        .collect();
    rdma_devices.sort_by(|a, b| infiniband::natural_cmp(a, b));
    Ok(EfaFunction {
        bdf,
        device_id,
        driver,
        rdma_devices,
    })
}

/// Why the RC checks (`rdma.loopback`, `gdr.loopback`, `pair`) leave EFA ports alone: the efa driver refuses RC
/// queue pairs (EOPNOTSUPP; UD and SRD only).
pub const NO_RC: &str =
    "EFA has no RC queue pairs: the fabric is proven by `collective`/the NCCL OFI log";

/// `devices` split into (not EFA, EFA) by the PCI function each belongs to. The bus unreadable is the error: a
/// device not known to be EFA is not known not to be.
pub fn split_efa(host: &Host, devices: &[String]) -> ReadResult<(Vec<String>, Vec<String>)> {
    let efa: Vec<String> = read_functions(host)?
        .into_iter()
        .flat_map(|f| f.rdma_devices)
        .collect();
    Ok(devices.iter().cloned().partition(|d| !efa.contains(d)))
}

/// The 6 bytes of the MAC whose IPv6 link-local EUI-64 address this GID is (`fe80::` + MAC with the
/// universal/local bit flipped and `ff:fe` in the middle), None for any other GID. EFA's GID is its interface's
/// address in this form (seen in every public `fi_info -p efa` capture: `fi_addr_efa://[fe80::816:eff:fe0c:9ba3]`).
pub fn gid_mac(gid: &str) -> Option<[u8; 6]> {
    let b = infiniband::parse_gid_bytes(gid)?;
    if b[..8] != [0xfe, 0x80, 0, 0, 0, 0, 0, 0] || b[11] != 0xff || b[12] != 0xfe {
        return None;
    }
    Some([b[8] ^ 0x02, b[9], b[10], b[13], b[14], b[15]])
}

/// `0a:1e:5b:00:00:3c` → bytes.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let parts: Vec<u8> = text
        .trim()
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).ok().filter(|_| p.len() == 2))
        .collect::<Option<_>>()?;
    parts.try_into().ok()
}

pub fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The netdev of the same interface as an EFA: the ENA netdev whose MAC is the one in the EFA's GID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairedNetdev {
    pub ifname: String,
    /// `up`, `down`, …; the read error's reason when unreadable.
    pub operstate: Result<String, String>,
    /// `1` / `0`; EINVAL while the interface is down is an answer too.
    pub carrier: Result<String, String>,
}

/// What the link of one EFA rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct EfaPort {
    pub device: String,
    pub rate: Result<Option<Rate>, String>,
    pub rate_text: String,
    pub gid: Result<String, String>,
    /// The MAC in the GID, when the GID has that form.
    pub mac: Option<[u8; 6]>,
    pub netdev: Option<PairedNetdev>,
}

/// Port 1 of an EFA device (EFA has one port) and its paired netdev among `netdevs` (name, MAC).
pub fn read_port(host: &Host, device: &str, netdevs: &[(String, [u8; 6])]) -> EfaPort {
    let port = infiniband::port_dir(device, 1);
    let rate_text = host.read_value(&format!("{port}/rate"));
    let gid = host
        .read_value(&format!("{port}/gids/0"))
        .map(|g| g.trim().to_string());
    let mac = gid.as_ref().ok().and_then(|g| gid_mac(g));
    let netdev = mac.and_then(|m| {
        netdevs.iter().find(|(_, nm)| *nm == m).map(|(ifname, _)| {
            let attr = |a: &str| {
                host.read_value(&format!("{CLASS_NET}/{ifname}/{a}"))
                    .map(|v| v.trim().to_string())
                    .map_err(|e| e.reason())
            };
            PairedNetdev {
                ifname: ifname.clone(),
                operstate: attr("operstate"),
                carrier: attr("carrier"),
            }
        })
    });
    EfaPort {
        device: device.to_string(),
        rate: rate_text
            .as_ref()
            .map(|t| infiniband::parse_rate(t))
            .map_err(|e| e.reason()),
        rate_text: rate_text.unwrap_or_else(|e| e.reason()),
        gid: gid.map_err(|e| e.reason()),
        mac,
        netdev,
    }
}

/// The netdevs with an Ethernet MAC (`address`), and the `address` files that could not be read or hold no
/// link-layer address at all (`path = reason`): one of those may be an EFA's pair. Interfaces with another kind
/// of address (IPoIB's 20 bytes, none for a tunnel) cannot pair and are left out. An unreadable class directory
/// is the error.
pub fn read_netdev_macs(host: &Host) -> ReadResult<NetdevMacs> {
    let names = match host.read_dir(CLASS_NET) {
        Ok(n) => n,
        Err(e) if e.is_not_found() => return Ok(NetdevMacs::default()),
        Err(e) => return Err(e),
    };
    let mut out = NetdevMacs::default();
    for n in names {
        let path = format!("{CLASS_NET}/{n}/address");
        match host.read(&path) {
            Ok(a) => match parse_mac(&a) {
                Some(mac) => out.macs.push((n, mac)),
                None if is_link_address(&a) => {}
                None => out
                    .unreadable
                    .push(format!("{path} = <not an address: {:?}>", a.trim())),
            },
            Err(e) if e.is_not_found() => {}
            Err(e) => out.unreadable.push(format!("{path} = {}", e.reason())),
        }
    }
    Ok(out)
}

/// What [`read_netdev_macs`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetdevMacs {
    pub macs: Vec<(String, [u8; 6])>,
    pub unreadable: Vec<String>,
}

/// Colon-separated hex bytes of any length, or nothing: what the kernel prints in `address`.
fn is_link_address(text: &str) -> bool {
    let t = text.trim();
    t.is_empty()
        || t.split(':')
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// One counter file of an EFA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EfaCounter {
    pub name: String,
    pub path: String,
    pub value: Result<u64, String>,
}

/// The counters of one `hw_counters/` directory whose names `wanted` accepts (`lifespan` is a setting). A
/// missing directory is an empty list (a driver without stats); an unreadable one is the error.
pub fn read_hw_counters(
    host: &Host,
    dir: &str,
    wanted: impl Fn(&str) -> bool,
) -> ReadResult<Vec<EfaCounter>> {
    let names = match host.read_dir(dir) {
        Ok(n) => n,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<EfaCounter> = names
        .into_iter()
        .filter(|n| n != "lifespan" && wanted(n))
        .map(|name| {
            let path = format!("{dir}/{name}");
            let value = match host.read_value(&path) {
                Ok(t) => t
                    .trim()
                    .parse()
                    .map_err(|_| format!("<not a count: {:?}>", t.trim())),
                Err(e) => Err(e.reason()),
            };
            EfaCounter { name, path, value }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The port's and the device's error counters.
pub fn read_error_counters(host: &Host, device: &str) -> ReadResult<Vec<EfaCounter>> {
    let mut out = read_hw_counters(
        host,
        &format!("{}/hw_counters", infiniband::port_dir(device, 1)),
        |n| PORT_ERROR_COUNTERS.contains(&n),
    )?;
    out.extend(read_hw_counters(
        host,
        &format!("{}/hw_counters", infiniband::device_dir(device)),
        is_device_error_counter,
    )?);
    Ok(out)
}

/// `/proc/uptime`: seconds since boot (first field).
pub const PROC_UPTIME: &str = "/proc/uptime";

pub fn parse_uptime(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
}

pub fn read_uptime(host: &Host) -> Result<f64, ReadError> {
    let text = host.read(PROC_UPTIME)?;
    parse_uptime(&text).ok_or_else(|| ReadError {
        path: PROC_UPTIME.into(),
        kind: ReadErrorKind::Other(format!("not an uptime: {:?}", text.trim())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reproduced: efa.link, efa.counters, efa.devices, efa.libfabric and rdma.counters each read `vendor` and
    /// `device` of every function on the bus (5 × 68 files on the 8-GPU tree).
    #[test]
    fn functions_are_read_once_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let function = dir.path().join("sys/devices/pci0000:00/0000:00:10.0");
        std::fs::create_dir_all(&function).unwrap();
        std::fs::write(function.join("vendor"), "0x1d0f\n").unwrap();
        std::fs::write(function.join("device"), "0xefa1\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sys/bus/pci/devices")).unwrap();
        std::fs::create_dir_all(dir.path().join("sys/class/infiniband")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:10.0",
            dir.path().join("sys/bus/pci/devices/0000:00:10.0"),
        )
        .unwrap();
        let host = Host::at(dir.path()).unwrap();
        assert_eq!(read_functions(&host).unwrap().len(), 1);
        std::fs::write(function.join("device"), "0xec20\n").unwrap();
        assert_eq!(
            read_functions(&host.clone()).unwrap().len(),
            1,
            "read again"
        );
        let fresh = Host::at(dir.path()).unwrap();
        assert!(read_functions(&fresh).unwrap().is_empty());
    }

    #[test]
    fn gid_names_its_interface_mac() {
        // `fi_addr_efa://[fe80::816:eff:fe0c:9ba3]` ↔ MAC 0a:16:0e:0c:9b:a3
        let mac = gid_mac("fe80:0000:0000:0000:0816:0eff:fe0c:9ba3").unwrap();
        assert_eq!(mac_text(mac), "0a:16:0e:0c:9b:a3");
        assert_eq!(parse_mac("0a:16:0e:0c:9b:a3"), Some(mac));
        // A GID of another form names no MAC.
        assert_eq!(gid_mac("fe80:0000:0000:0000:946d:ae03:00cd:e701"), None);
        assert_eq!(gid_mac("0000:0000:0000:0000:0000:ffff:0a00:0101"), None);
        assert_eq!(parse_mac("0a:16:0e:0c:9b"), None);
        assert_eq!(parse_mac("0a:16:0e:0c:9b:a3:ff"), None);
    }

    #[test]
    fn ids_and_error_counters() {
        assert!(is_efa(0x1d0f, 0xefa0) && is_efa(0x1d0f, 0xefa4));
        assert!(!is_efa(0x1d0f, 0xec20), "ENA is not an EFA");
        assert!(!is_efa(0x15b3, 0xefa0));
        assert!(
            is_device_error_counter("create_qp_err")
                && is_device_error_counter("no_completion_cmds")
        );
        assert!(!is_device_error_counter("submitted_cmds"));
        assert_eq!(parse_uptime("187.06 33670.80\n"), Some(187.06));
        assert_eq!(parse_uptime("garbage"), None);
    }
}
