//! RDMA devices: `/sys/class/infiniband/<dev>/...` (device attributes, ports, GIDs, counters) and the verbs
//! character devices (`/sys/class/infiniband_verbs`, `/dev/infiniband`).

use crate::host::{Host, ReadError, ReadErrorKind};

pub const CLASS_INFINIBAND: &str = "/sys/class/infiniband";
pub const CLASS_INFINIBAND_VERBS: &str = "/sys/class/infiniband_verbs";
pub const DEV_INFINIBAND: &str = "/dev/infiniband";

/// Names under `/sys/class/infiniband` (`mlx5_0`, `mlx5_bond_0`, `rocep1s0f0`, …). Missing class dir = none.
/// Listed once per host and shared: the presence rule and most RDMA checks ask.
pub fn read_device_names(host: &Host) -> Result<Vec<String>, ReadError> {
    host.shared(|host| DeviceNames(read_device_names_uncached(host)))
        .0
        .clone()
}

/// The shared model's own type ([`Host::shared`] keys models by type).
struct DeviceNames(Result<Vec<String>, ReadError>);

fn read_device_names_uncached(host: &Host) -> Result<Vec<String>, ReadError> {
    match host.read_dir(CLASS_INFINIBAND) {
        Ok(mut names) => {
            names.sort_by(|a, b| natural_cmp(a, b));
            Ok(names)
        }
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// `mlx5_2` before `mlx5_10`: digit runs compare as numbers.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, sa), (db, sb)) in ca.iter().zip(cb.iter()) {
        let ord = if *da && *db {
            sa.parse::<u128>()
                .unwrap_or(0)
                .cmp(&sb.parse::<u128>().unwrap_or(0))
        } else {
            sa.cmp(sb)
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len())
}

pub fn device_dir(dev: &str) -> String {
    format!("{CLASS_INFINIBAND}/{dev}")
}

pub fn port_dir(dev: &str, port: u32) -> String {
    format!("{CLASS_INFINIBAND}/{dev}/ports/{port}")
}

/// Device-level attributes. Optional files that are missing or empty are `None`, except `fw_ver`, which keeps an
/// empty file as `Some("")` (soft-RoCE has one: no firmware) apart from a missing one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    pub name: String,
    /// `1: CA` → `CA`.
    pub node_type: Option<String>,
    pub fw_ver: Option<String>,
    pub board_id: Option<String>,
    /// `MT4129`: the HCA model; siblings with the same model should run at the same rate.
    pub hca_type: Option<String>,
    /// The PCI function behind the device (`0000:19:00.0`), from the `device` symlink.
    pub pci_bdf: Option<String>,
    /// Port numbers, ascending; an unreadable `ports/` directory is kept as the error, never read as no port.
    pub ports: Result<Vec<u32>, ReadError>,
    /// The first attribute file that exists but could not be read (its field is then `None`): missing is a fact
    /// about the driver, unreadable is not.
    pub unread: Option<ReadError>,
}

/// `1: CA` → (1, `CA`); also used for `state` (`4: ACTIVE`) and `phys_state` (`5: LinkUp`).
pub fn parse_numbered(text: &str) -> Option<(u32, String)> {
    let (n, name) = text.trim().split_once(':')?;
    Some((n.trim().parse().ok()?, name.trim().to_string()))
}

/// The canonical directory of a class path (`/sys/class/infiniband/mlx5_0` → `/sys/devices/.../mlx5_0`), so
/// that the many reads below it skip the class symlink; the class path itself when it cannot be resolved.
fn real_dir(host: &Host, dir: &str) -> String {
    host.canonical(dir).unwrap_or_else(|_| dir.to_string())
}

/// The PCI function behind an RDMA device (`0000:19:00.0`), from its `device` symlink.
pub fn read_device_bdf(host: &Host, name: &str) -> Option<String> {
    device_bdf(host, name).ok().flatten()
}

/// [`read_device_bdf`] where the answer decides a verdict: no `device` link (a software device such as rxe) is
/// `None`, a link that is there but cannot be resolved is the error.
pub fn device_bdf(host: &Host, name: &str) -> Result<Option<String>, ReadError> {
    let target = crate::host::optional(host.canonical(&format!("{}/device", device_dir(name))))?;
    Ok(target
        .and_then(|p| p.rsplit('/').next().map(str::to_string))
        .filter(|b| crate::sysfs::pci::Bdf::parse(b).is_some()))
}

/// Port numbers under `ports/`, ascending; an unreadable directory is the error, never no port.
pub fn read_port_numbers(host: &Host, name: &str) -> Result<Vec<u32>, ReadError> {
    let dir = real_dir(host, &device_dir(name));
    super::stable::read_dir(host, &format!("{dir}/ports")).map(|names| {
        let mut ports: Vec<u32> = names.iter().filter_map(|p| p.parse().ok()).collect();
        ports.sort_unstable();
        ports
    })
}

pub fn read_device(host: &Host, name: &str) -> RdmaDevice {
    let dir = real_dir(host, &device_dir(name));
    let unread = std::cell::RefCell::new(None);
    let read = |file: &str| {
        crate::host::optional(super::stable::read(host, &format!("{dir}/{file}"))).unwrap_or_else(
            |e| {
                unread.borrow_mut().get_or_insert(e);
                None
            },
        )
    };
    let opt = |file: &str| read(file).filter(|s| !s.is_empty());
    RdmaDevice {
        name: name.to_string(),
        node_type: opt("node_type").map(|t| parse_numbered(&t).map(|(_, n)| n).unwrap_or(t)),
        fw_ver: read("fw_ver"),
        board_id: opt("board_id"),
        hca_type: opt("hca_type"),
        pci_bdf: read_device_bdf(host, name),
        ports: read_port_numbers(host, name),
        unread: unread.into_inner(),
    }
}

/// `hca_type` (`MT4129`): the HCA model; `None` where the driver has none (missing or empty). An unreadable
/// file is the error: the model decides which ports are compared as siblings.
pub fn read_hca_type(host: &Host, name: &str) -> Result<Option<String>, ReadError> {
    let dir = real_dir(host, &device_dir(name));
    Ok(
        crate::host::optional(super::stable::read(host, &format!("{dir}/hca_type")))?
            .filter(|t| !t.is_empty()),
    )
}

/// `node_type` as the kernel writes it (`4: RNIC`); `None` where the file is missing. An unreadable file is the
/// error: the node type decides the transport (an RNIC is iWARP whatever its link layer).
pub fn read_node_type(host: &Host, name: &str) -> Result<Option<String>, ReadError> {
    let dir = real_dir(host, &device_dir(name));
    crate::host::optional(super::stable::read(host, &format!("{dir}/node_type")))
}

/// `rate`: `400 Gb/sec (4X NDR)`, `2.5 Gb/sec (1X SDR)`, `10 Gb/sec (4X)` (old kernels).
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    pub gbps: f64,
    pub width: u32,
    /// `NDR`, `HDR`…; None when the kernel printed none (old kernels: SDR).
    pub speed: Option<String>,
}

pub fn parse_rate(text: &str) -> Option<Rate> {
    let text = text.trim();
    let (number, rest) = text.split_once(" Gb/sec (")?;
    let inner = rest.strip_suffix(')')?;
    let (width, speed) = match inner.split_once(' ') {
        Some((w, s)) => (w, Some(s.trim())),
        None => (inner, None),
    };
    let width: u32 = width.strip_suffix('X')?.parse().ok()?;
    let speed = match speed {
        Some(s) if s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric()) => return None,
        s => s.map(str::to_string),
    };
    let valid_number = number.split_once('.').map_or(
        !number.is_empty() && number.chars().all(|c| c.is_ascii_digit()),
        |(i, f)| !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()) && f == "5",
    );
    if !valid_number {
        return None;
    }
    Some(Rate {
        gbps: number.parse().ok()?,
        width,
        speed,
    })
}

/// `0x1a` → 26.
pub fn parse_lid(text: &str) -> Option<u32> {
    u32::from_str_radix(text.trim().strip_prefix("0x")?, 16).ok()
}

/// One port's state as read; each field keeps the raw text for evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct PortAttrs {
    pub device: String,
    pub port: u32,
    pub state: Result<String, ReadError>,
    pub phys_state: Result<String, ReadError>,
    pub rate: Result<String, ReadError>,
    pub link_layer: Result<String, ReadError>,
    pub lid: Result<String, ReadError>,
    pub sm_lid: Result<String, ReadError>,
}

impl PortAttrs {
    /// `mlx5_0/1`: the subject of per-port results.
    pub fn subject(&self) -> String {
        format!("{}/{}", self.device, self.port)
    }
    pub fn is_active(&self) -> bool {
        self.state
            .as_deref()
            .ok()
            .and_then(parse_numbered)
            .is_some_and(|(n, _)| n == 4)
    }
    pub fn is_link_up(&self) -> bool {
        self.phys_state
            .as_deref()
            .ok()
            .and_then(parse_numbered)
            .is_some_and(|(n, _)| n == 5)
    }
    pub fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Ok("Ethernet")
    }
    pub fn is_infiniband(&self) -> bool {
        self.link_layer.as_deref() == Ok("InfiniBand")
    }
    pub fn parsed_rate(&self) -> Option<Rate> {
        self.rate.as_deref().ok().and_then(parse_rate)
    }
    /// The first attribute that could not be read or holds no value the kernel writes: the port's state is then
    /// unknown, whichever attribute a probe looks at (they are read together, so each must be sound).
    pub fn unread(&self) -> Option<ReadError> {
        let dir = port_dir(&self.device, self.port);
        type Sound = fn(&str) -> bool;
        let checks: [(&str, &Result<String, ReadError>, Sound); 6] = [
            ("state", &self.state, |t| parse_numbered(t).is_some()),
            ("phys_state", &self.phys_state, |t| {
                parse_numbered(t).is_some()
            }),
            ("rate", &self.rate, |t| parse_rate(t).is_some()),
            ("link_layer", &self.link_layer, |t| {
                ["InfiniBand", "Ethernet", "Unknown"].contains(&t)
            }),
            ("lid", &self.lid, |t| parse_lid(t).is_some()),
            ("sm_lid", &self.sm_lid, |t| parse_lid(t).is_some()),
        ];
        checks
            .into_iter()
            .find_map(|(name, value, sound)| match value {
                // The kernel's answer for a port without a valid width (rate_show): no rate, judged as such.
                Err(e) if name == "rate" && e.kind == ReadErrorKind::InvalidArgument => None,
                Err(e) => Some(e.clone()),
                Ok(t) if !sound(t) => Some(ReadError {
                    path: format!("{dir}/{name}"),
                    kind: ReadErrorKind::Other(format!("not a value the kernel writes: {t:?}")),
                }),
                Ok(_) => None,
            })
    }

    /// `(path, value or reason)` for every attribute, in a fixed order.
    pub fn evidence(&self) -> Vec<(String, String)> {
        let dir = port_dir(&self.device, self.port);
        [
            ("state", &self.state),
            ("phys_state", &self.phys_state),
            ("rate", &self.rate),
            ("link_layer", &self.link_layer),
            ("lid", &self.lid),
            ("sm_lid", &self.sm_lid),
        ]
        .into_iter()
        .map(|(name, v)| {
            (
                format!("{dir}/{name}"),
                match v {
                    Ok(s) => s.clone(),
                    Err(e) => e.reason(),
                },
            )
        })
        .collect()
    }
}

pub fn read_port(host: &Host, dev: &str, port: u32) -> PortAttrs {
    let dir = real_dir(host, &port_dir(dev, port));
    let f = |name: &str| host.read_value(&format!("{dir}/{name}"));
    PortAttrs {
        device: dev.to_string(),
        port,
        state: f("state"),
        phys_state: f("phys_state"),
        rate: f("rate"),
        link_layer: f("link_layer"),
        lid: f("lid"),
        sm_lid: f("sm_lid"),
    }
}

/// `(device, port)` for every port of every RDMA device, in natural device order; only directories are listed,
/// so a probe that needs no port attribute reads none.
pub fn read_all_port_ids(host: &Host) -> Result<Vec<(String, u32)>, ReadError> {
    let mut out = Vec::new();
    for name in read_device_names(host)? {
        for port in read_port_numbers(host, &name)? {
            out.push((name.clone(), port));
        }
    }
    Ok(out)
}

/// Every port of every RDMA device with its attributes, grouped by device name, in natural device order. A port
/// attribute that could not be read, or that holds garbage, is the error ([`PortAttrs::unread`]). Read once per
/// host and shared by the checks of a run.
pub fn read_all_ports(host: &Host) -> Result<Vec<(String, Vec<PortAttrs>)>, ReadError> {
    host.shared(|host| AllPorts(read_all_ports_uncached(host)))
        .0
        .clone()
}

/// The shared model's own type ([`Host::shared`] keys models by type).
struct AllPorts(Result<Vec<(String, Vec<PortAttrs>)>, ReadError>);

fn read_all_ports_uncached(host: &Host) -> Result<Vec<(String, Vec<PortAttrs>)>, ReadError> {
    let mut out: Vec<(String, Vec<PortAttrs>)> = read_device_names(host)?
        .into_iter()
        .map(|name| (name, Vec::new()))
        .collect();
    for (name, ports) in &mut out {
        for port in read_port_numbers(host, name)? {
            let attrs = read_port(host, name, port);
            if let Some(e) = attrs.unread() {
                return Err(e);
            }
            ports.push(attrs);
        }
    }
    Ok(out)
}

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

/// One counter file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// `counters/symbol_error` or `hw_counters/out_of_buffer`.
    pub name: String,
    pub path: String,
    pub value: CounterValue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterValue {
    Value(u64),
    /// `N/A (no PMA)`: the driver says it has no value.
    NotAvailable(String),
    /// Listed, but not read: the caller did not want it.
    NotRead,
    Unreadable(String),
}

/// Bit width of a PMA counter (`counters/*`), for saturation. 64-bit and unknown ones: None.
pub fn counter_width(name: &str) -> Option<u32> {
    match name {
        "symbol_error"
        | "port_rcv_errors"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors"
        | "port_xmit_discards"
        | "VL15_dropped" => Some(16),
        "link_error_recovery"
        | "link_downed"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors" => Some(8),
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => Some(4),
        "port_xmit_wait" => Some(32),
        _ => None,
    }
}

/// A PMA counter stuck at its width maximum: its true value is unknown.
pub fn is_saturated(name: &str, value: u64) -> bool {
    counter_width(name).is_some_and(|bits| value == (1u64 << bits) - 1)
}

/// `counters/*` then `hw_counters/*` of one port. `hw_counters/lifespan` is a setting, not a counter. A
/// directory that cannot be listed is one entry named after it (`counters`), unreadable. Only the counters
/// `wanted` (by `group/name`) are read: some platforms log a firmware message per read. A wanted file holding
/// neither a count nor `N/A` is unreadable, never a missing value.
pub fn read_counters(
    host: &Host,
    dev: &str,
    port: u32,
    wanted: impl Fn(&str) -> bool,
) -> Vec<Counter> {
    let shown = port_dir(dev, port);
    let real = real_dir(host, &shown);
    let mut out = Vec::new();
    for group in ["counters", "hw_counters"] {
        // A driver without a PMA has no `counters/`; one that cannot be listed is kept as an unreadable entry.
        let names = match host.read_dir(&format!("{real}/{group}")) {
            Ok(n) => n,
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                out.push(Counter {
                    name: group.to_string(),
                    path: format!("{shown}/{group}"),
                    value: CounterValue::Unreadable(e.reason()),
                });
                continue;
            }
        };
        for name in names {
            if group == "hw_counters" && name == "lifespan" {
                continue;
            }
            let path = format!("{shown}/{group}/{name}");
            let full = format!("{group}/{name}");
            let value = if !wanted(&full) {
                CounterValue::NotRead
            } else {
                match host.read_value(&format!("{real}/{group}/{name}")) {
                    Ok(t) => match t.trim().parse() {
                        Ok(v) => CounterValue::Value(v),
                        Err(_) if t.starts_with("N/A") => CounterValue::NotAvailable(t),
                        Err(_) => CounterValue::Unreadable(format!("<not a count: {t:?}>")),
                    },
                    Err(e) => CounterValue::Unreadable(e.reason()),
                }
            };
            out.push(Counter {
                name: full,
                path,
                value,
            });
        }
    }
    out
}

/// `uverbsN` → the RDMA device it opens, from `/sys/class/infiniband_verbs/uverbsN/ibdev`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UverbsMap {
    /// `(uverbsN, ibdev)`.
    pub map: Vec<(String, String)>,
    /// `ibdev` files that could not be read, as `(path, reason)`: one of them may be any device's.
    pub unreadable: Vec<(String, String)>,
}

pub fn read_uverbs_map(host: &Host) -> UverbsMap {
    let mut map = Vec::new();
    let mut unreadable = Vec::new();
    let names = match host.read_dir(CLASS_INFINIBAND_VERBS) {
        Ok(n) => n,
        // No ib_uverbs loaded.
        Err(e) if e.is_not_found() => vec![],
        // Any uverbs device may be behind it.
        Err(e) => {
            unreadable.push((e.path.clone(), e.reason()));
            vec![]
        }
    };
    for n in names.into_iter().filter(|n| n.starts_with("uverbs")) {
        let path = format!("{CLASS_INFINIBAND_VERBS}/{n}/ibdev");
        match host.read_value(&path) {
            Ok(ibdev) => map.push((n, ibdev)),
            Err(e) => unreadable.push((path, e.reason())),
        }
    }
    UverbsMap { map, unreadable }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rdma.link, rdma.roce, the loopbacks and `--profile auto` all ask for the ports: read once per host.
    #[test]
    fn all_ports_are_read_once_per_host() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let host = Host::at(dir.path()).unwrap();
        let first = read_all_ports(&host).unwrap();
        let state = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/ports/1/state");
        std::fs::write(&state, "1: DOWN\n").unwrap();
        assert_eq!(read_all_ports(&host.clone()).unwrap(), first);
        let fresh = read_all_ports(&Host::at(dir.path()).unwrap()).unwrap();
        assert_ne!(fresh, first);
    }

    /// A device whose `ports/` cannot be listed is an error, not a device without ports (rdma.link skipped
    /// "no RDMA port" on it; rdma.loopback failed "0 RDMA port(s), none ACTIVE").
    #[test]
    fn unreadable_ports_directory_is_an_error() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let ports = dir.path().join("sys/devices/virtual/infiniband/rxe0/ports");
        std::fs::remove_dir_all(&ports).unwrap();
        std::os::unix::fs::symlink("ports", &ports).unwrap();
        let host = Host::at(dir.path()).unwrap();
        let e = read_all_ports(&host).unwrap_err();
        assert!(e.path.ends_with("rxe0/ports"), "{e}");
        assert!(read_device(&host, "rxe0").ports.is_err());
        for id in ["rdma.link", "rdma.loopback"] {
            let r = crate::probes::testing::run_on_root(
                crate::probes::find(id).unwrap(),
                dir.path(),
                "generic",
            );
            assert_eq!(r[0].status, crate::probe::Status::Error, "{id}: {r:?}");
        }
    }

    /// `path` (under the tree) replaced by a link to itself: listing it fails (ELOOP), for root too.
    fn unreadable(root: &std::path::Path, path: &str) {
        let full = root.join(path);
        std::fs::remove_dir_all(&full).unwrap();
        std::os::unix::fs::symlink(full.file_name().unwrap(), &full).unwrap();
    }

    /// A port attribute holding garbage was read as a value: rdma.counters and rdma.roce passed over it,
    /// rdma.link warned "rate not recognised" only.
    #[test]
    fn garbled_port_attribute_is_an_error() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let ports = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/ports/1");
        for name in ["state", "rate", "lid"] {
            let file = ports.join(name);
            let real = std::fs::read(&file).unwrap();
            std::fs::write(&file, "garbage?\n").unwrap();
            let host = Host::at(dir.path()).unwrap();
            let e = read_all_ports(&host).unwrap_err();
            assert!(e.path.ends_with(&format!("ports/1/{name}")), "{e}");
            assert!(e.reason().contains("garbage?"), "{e}");
            std::fs::write(&file, real).unwrap();
        }
    }

    /// A judged counter holding garbage was "not available" and the port passed.
    #[test]
    fn garbled_counter_is_unreadable_not_unavailable() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let file = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/ports/1/hw_counters/rcvd_seq_err");
        std::fs::write(&file, "garbage?\n").unwrap();
        let host = Host::at(dir.path()).unwrap();
        let counters = read_counters(&host, "rxe0", 1, |n| n == "hw_counters/rcvd_seq_err");
        let c = counters
            .iter()
            .find(|c| c.name == "hw_counters/rcvd_seq_err")
            .unwrap();
        assert!(
            matches!(&c.value, CounterValue::Unreadable(w) if w.contains("garbage?")),
            "{c:?}"
        );
        assert!(counters
            .iter()
            .filter(|c| c.name != "hw_counters/rcvd_seq_err")
            .all(|c| c.value == CounterValue::NotRead));
    }

    /// An unreadable counter directory is never "no counters" (rxe: rdma.counters skipped "no counters
    /// exposed"; HGX with `counters/` unreadable: passed on `hw_counters` alone).
    #[test]
    fn unreadable_counter_directories_are_reported() {
        for (tree, dir) in [
            ("rxe-vm", "sys/devices/virtual/infiniband/rxe0/ports/1/hw_counters"),
            ("hgx-healthy", "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0/infiniband/mlx5_0/ports/1/counters"),
        ] {
            let copy = crate::probes::testing::copy_scenario(tree);
            unreadable(copy.path(), dir);
            let r = crate::probes::testing::run_on_root(
                crate::probes::find("rdma.counters").unwrap(),
                copy.path(),
                "generic",
            );
            let port = r.iter().find(|x| x.subject.as_deref().is_some_and(|s| s.ends_with("0/1"))).unwrap();
            assert!(
                !matches!(port.status, crate::probe::Status::Pass | crate::probe::Status::Skip),
                "{tree}: {port:?}"
            );
        }
    }

    /// An unreadable `/sys/class/infiniband_verbs` is no proof that no uverbs device maps to a device
    /// (rdma.devices failed "no uverbs device maps to it (ib_uverbs not loaded?)").
    #[test]
    fn unreadable_uverbs_class_is_reported() {
        let copy = crate::probes::testing::copy_scenario("rxe-vm");
        unreadable(copy.path(), "sys/class/infiniband_verbs");
        let r = crate::probes::testing::run_on_root(
            crate::probes::find("rdma.devices").unwrap(),
            copy.path(),
            "generic",
        );
        let dev = r
            .iter()
            .find(|x| x.subject.as_deref() == Some("rxe0"))
            .unwrap();
        assert_eq!(dev.status, crate::probe::Status::Error, "{dev:?}");
        assert!(
            dev.summary.contains("cannot tell which uverbs device"),
            "{dev:?}"
        );
    }

    #[test]
    fn rate_every_kernel_form() {
        let r = parse_rate("400 Gb/sec (4X NDR)").unwrap();
        assert_eq!(
            (r.gbps, r.width, r.speed.as_deref()),
            (400.0, 4, Some("NDR"))
        );
        assert_eq!(parse_rate("200 Gb/sec (2X NDR)").unwrap().width, 2);
        assert_eq!(parse_rate("100 Gb/sec (4X EDR)").unwrap().gbps, 100.0);
        let old = parse_rate("10 Gb/sec (4X)").unwrap();
        assert_eq!((old.gbps, old.speed), (10.0, None));
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)").unwrap().gbps, 2.5);
        assert_eq!(parse_rate("800 Gb/sec (4X XDR)").unwrap().gbps, 800.0);
    }

    #[test]
    fn rate_garbage_is_none() {
        for bad in [
            "",
            "fast",
            "400 Gb/sec",
            "400 Gb/sec (X NDR)",
            "2.7 Gb/sec (1X SDR)",
            "-5 Gb/sec (4X)",
        ] {
            assert_eq!(parse_rate(bad), None, "{bad}");
        }
    }

    #[test]
    fn numbered_state_parses() {
        assert_eq!(parse_numbered("4: ACTIVE"), Some((4, "ACTIVE".into())));
        assert_eq!(parse_numbered("5: LinkUp"), Some((5, "LinkUp".into())));
        assert_eq!(
            parse_numbered("9: <unknown>"),
            Some((9, "<unknown>".into()))
        );
        assert_eq!(parse_numbered("ACTIVE"), None);
    }

    #[test]
    fn lid_hex() {
        assert_eq!(parse_lid("0x1a"), Some(26));
        assert_eq!(parse_lid("0xffff"), Some(0xffff));
        assert_eq!(parse_lid("26"), None);
    }

    #[test]
    fn counters_at_width_maximum_are_saturated() {
        assert!(is_saturated("link_downed", 255));
        assert!(is_saturated("port_xmit_discards", 65535));
        assert!(is_saturated("port_xmit_wait", 4294967295));
        assert!(!is_saturated("symbol_error", 12));
        assert!(!is_saturated("port_rcv_data", u64::MAX));
    }

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
    fn device_names_sort_naturally() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_bond_0", "mlx5_1"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"]);
    }
}

#[cfg(test)]
mod gid_tests {
    use super::*;

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
