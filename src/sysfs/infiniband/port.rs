//! Ports (`/sys/class/infiniband/<dev>/ports/<n>/…`): state, rate, LIDs, link layer; every port of a host
//! read once per run.

use super::{device_dir, parse_numbered, port_dir, read_device_names, real_dir};
use crate::host::{Host, ReadError, ReadErrorKind};

/// Port numbers under `ports/`, ascending; an unreadable directory is the error, never no port.
pub fn read_port_numbers(host: &Host, name: &str) -> Result<Vec<u32>, ReadError> {
    let dir = real_dir(host, &device_dir(name));
    crate::sysfs::stable::read_dir(host, &format!("{dir}/ports")).map(|names| {
        let mut ports: Vec<u32> = names.iter().filter_map(|p| p.parse().ok()).collect();
        ports.sort_unstable();
        ports
    })
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

/// The link layers the kernel writes (`Unknown` on EFA).
pub const LINK_LAYERS: &[&str] = &["InfiniBand", "Ethernet", "Unknown"];

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
            ("link_layer", &self.link_layer, |t| LINK_LAYERS.contains(&t)),
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

    /// The link layer as a sign of the port's kind: None where the file is missing (no sign); an error where it
    /// is there but cannot be read or holds no link layer the kernel writes.
    pub fn link_layer_sign(&self) -> Result<Option<&str>, ReadError> {
        match &self.link_layer {
            Ok(t) if LINK_LAYERS.contains(&t.as_str()) => Ok(Some(t)),
            Ok(t) => Err(ReadError {
                path: format!("{}/link_layer", port_dir(&self.device, self.port)),
                kind: ReadErrorKind::Other(format!("not a link layer the kernel writes: {t:?}")),
            }),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.clone()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::infiniband::read_device;

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
            assert_eq!(r[0].status, crate::model::Status::Error, "{id}: {r:?}");
        }
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
    fn lid_hex() {
        assert_eq!(parse_lid("0x1a"), Some(26));
        assert_eq!(parse_lid("0xffff"), Some(0xffff));
        assert_eq!(parse_lid("26"), None);
    }
}
