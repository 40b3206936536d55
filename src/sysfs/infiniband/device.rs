//! Device attributes (`/sys/class/infiniband/<dev>/…`), the device list and the verbs character devices
//! (`/sys/class/infiniband_verbs`).

use super::port::read_port_numbers;
use super::{device_dir, parse_numbered, real_dir, CLASS_INFINIBAND, CLASS_INFINIBAND_VERBS};
use crate::host::{Host, ReadError};

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

pub fn read_device(host: &Host, name: &str) -> RdmaDevice {
    let dir = real_dir(host, &device_dir(name));
    let unread = std::cell::RefCell::new(None);
    let read = |file: &str| {
        crate::host::optional(crate::sysfs::stable::read(host, &format!("{dir}/{file}")))
            .unwrap_or_else(|e| {
                unread.borrow_mut().get_or_insert(e);
                None
            })
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
        crate::host::optional(crate::sysfs::stable::read(host, &format!("{dir}/hca_type")))?
            .filter(|t| !t.is_empty()),
    )
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
    use crate::sysfs::infiniband::unreadable;

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
        assert_eq!(dev.status, crate::model::Status::Error, "{dev:?}");
        assert!(
            dev.summary.contains("cannot tell which uverbs device"),
            "{dev:?}"
        );
    }

    #[test]
    fn device_names_sort_naturally() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_bond_0", "mlx5_1"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"]);
    }
}
