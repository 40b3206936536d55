//! What each RDMA port is for: a **compute** rail (NCCL's traffic) or a **storage**/frontend port (storage,
//! in-band, management), and which ports of a multi-port device are off by design. Pure: callers read the
//! ports, the PCI tree and the settings; the rule is here, and every reader (`rdma.link`, `rdma.roce`, `topo`)
//! applies the same one.
//!
//! The rule, first that applies:
//! 1. `NCCL_IB_HCA` is set: the ports it keeps, in NCCL's syntax (prefix by default, `=` exact, `^` exclude,
//!    `dev:port`), are compute; the others storage.
//! 2. What the device itself shows makes it front end or management, wherever it sits ([`front_end`]): a VM's
//!    accelerated-networking VF (its netdev enslaved to Hyper-V's netvsc), a port of another link layer than
//!    the rails (an Ethernet bond beside InfiniBand rails, InfiniBand beside EFA), a bond of another model
//!    beside the rails. The rails are the most common (link layer, model) kind. This holds where no PCI tree
//!    places the ports (a capture of `/sys/class/infiniband` alone) and where every port is equally near
//!    (a VM's flat bus).
//! 3. GPUs are on the PCI bus: each GPU's nearest ports (the least PCIe distance, all of equals, as NCCL's
//!    topology search prefers) are compute; a port that is no GPU's nearest is storage. Where the profile names
//!    a rail count and more ports than that are nearest to some GPU, the nearest ones are kept.
//! 4. Otherwise every port is compute.
//!
//! A fact a rule rests on that is there but cannot be read is an error naming the file, never another role: a
//! device's sign (its link layer, model, netdev's master) fails [`read`]; a PCI function that could be a GPU, a
//! NIC or a port between them (its class or NUMA node unread) leaves each port whose placement it could change
//! without a role ([`Use::Unplaced`], naming the files), and its checks report an error rather than judge it by
//! the other role's expectations (a compute rail read as storage has its down link only warned about).

use crate::host::{optional, Host, ReadError};
use crate::nccl::env::IfList;
use crate::probe::{common, CheckResult};
use crate::rules::topology::PcieDistance;
use crate::rules::topology::{self, PciTree, Role as PciRole, GPU_NIC_PATHS};
use crate::sysfs::infiniband::{self, natural_cmp, parse_numbered, PortAttrs};
use crate::sysfs::net::CLASS_NET;

/// Hyper-V's synthetic NIC driver: an accelerated-networking VF's netdev is enslaved to its interface.
const NETVSC_DRIVER: &str = "hv_netvsc";

/// `phys_state` 3: the port was disabled (by the platform, firmware or `ibportstate`), not left without a peer.
const PHYS_DISABLED: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Compute,
    Storage,
}

impl Role {
    /// The name in reports (`role` in JSON, `role = …` in evidence).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Compute => "compute",
            Role::Storage => "storage",
        }
    }
}

/// One port to classify: its device, number and PCI function (none for a software device), and what the
/// device shows of its kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortRef {
    pub device: String,
    pub port: u32,
    pub bdf: Option<String>,
    pub signs: Signs,
}

/// What a device shows, beyond where it sits on PCIe, that tells a rail from a front-end or management port.
/// A sign that is missing is absent; one that is there but cannot be read is the error ([`read`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signs {
    /// The port's link layer (`InfiniBand`, `Ethernet`; `Unknown` on EFA).
    pub link_layer: Option<String>,
    /// The model: `hca_type` (`MT4129`).
    pub model: Option<String>,
    /// An AWS EFA (by PCI id).
    pub efa: bool,
    /// Its netdev enslaved to a Hyper-V netvsc interface: `enP30832s1 under eth0`.
    pub netvsc: Option<String>,
    /// RoCE LAG: an `mlx5_bond_N` device, or its netdev enslaved to a bond.
    pub bond: bool,
}

/// A port's role and why it has it (shown as evidence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    pub role: Role,
    pub why: String,
    /// False for a management port (NVLink switch management, a VM's front end): it carries no job's data, so
    /// no transfer check picks it.
    pub data_path: bool,
}

impl Assigned {
    /// `role = compute (nearest RDMA port of GPU0 0000:18:00.0, PIX)`.
    pub fn evidence(&self) -> String {
        format!("role = {} ({})", self.role.as_str(), self.why)
    }
}

/// What a port is used for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Use {
    /// Disabled while a sibling port of its device carries data ([`disabled_by_design`]): not judged.
    DisabledByDesign,
    Role(Assigned),
    /// No role: what decides it could not be read (`path = reason` each). Its checks report an error
    /// ([`unplaced`]), never judge it as either role.
    Unplaced(Vec<String>),
}

/// A port's role, or the facts that decide it and could not be read (`path = reason` each).
pub type Placed = Result<Assigned, Vec<String>>;

/// The error a role-aware check `id` reports for a port without a role ([`Use::Unplaced`]).
pub fn unplaced(id: &str, port: &PortAttrs, unread: &[String]) -> CheckResult {
    let mut r = CheckResult::error(
        id,
        "role unknown: what decides whether it is a compute rail or a storage/frontend port could not be read",
    )
    .subject(port.subject());
    for line in unread {
        r = r.note(line.clone());
    }
    r.fix("check the files named above (run as root if access is denied); set NCCL_IB_HCA to name the rails without them")
        .code(&common::UNREAD)
}

/// Every RDMA port with its use, grouped by device in natural order (see [`Ports`]): the ports as
/// [`infiniband::read_all_ports`] gives them, each device's PCI function read strictly (a `device` link that
/// cannot be resolved is the error, never a software device) and the PCI tree for placement. The one reader the
/// role-aware checks share; [`assign`] decides.
pub fn read(
    host: &Host,
    nccl_ib_hca: Option<&str>,
    rails: Option<u32>,
) -> Result<Ports, ReadError> {
    let devices = infiniband::read_all_ports(host)?;
    let tree = PciTree::read(host)?;
    let by_hca = nccl_ib_hca.is_some_and(|v| !v.trim().is_empty());
    let mut refs = Vec::new();
    let mut off = Vec::new();
    for (dev, ports) in &devices {
        let bdf = infiniband::device_bdf(host, dev)?;
        let device = DeviceSigns::read(host, dev, bdf.as_deref(), &tree)?;
        let flags = disabled_by_design(&ports.iter().collect::<Vec<_>>());
        for (p, disabled) in ports.iter().zip(flags) {
            off.push(disabled);
            if !disabled {
                refs.push(PortRef {
                    device: dev.clone(),
                    port: p.port,
                    bdf: bdf.clone(),
                    signs: device.of_port(p)?,
                });
            }
        }
    }
    let mut roles = assign(&refs, nccl_ib_hca, rails, Some(&tree)).into_iter();
    let mut off = off.into_iter();
    let devices = devices
        .into_iter()
        .map(|(dev, ports)| {
            let ports = ports
                .into_iter()
                .map(|p| {
                    let usage = if off.next().unwrap_or(false) {
                        Use::DisabledByDesign
                    } else {
                        match roles.next().expect("one role per port judged") {
                            Ok(a) => Use::Role(a),
                            Err(unread) => Use::Unplaced(unread),
                        }
                    };
                    (p, usage)
                })
                .collect();
            (dev, ports)
        })
        .collect();
    Ok(Ports {
        devices,
        placed_on: (!by_hca).then_some(tree),
    })
}

/// The devices whose every port is a management port (see [`Assigned::data_path`]), read as [`read`] reads
/// them without `NCCL_IB_HCA`: the transfer checks (`rdma.loopback`, `gdr.loopback`) leave them alone. A device
/// with a port of unknown role is not one of them.
pub fn management_devices(host: &Host) -> Result<Vec<(String, String)>, ReadError> {
    let ports = read(host, None, None)?;
    Ok(ports
        .devices
        .iter()
        .filter_map(|(dev, ports)| {
            if ports.iter().any(|(_, u)| matches!(u, Use::Unplaced(_))) {
                return None;
            }
            let roles: Vec<&Assigned> = ports
                .iter()
                .filter_map(|(_, u)| match u {
                    Use::Role(a) => Some(a),
                    Use::DisabledByDesign | Use::Unplaced(_) => None,
                })
                .collect();
            let first = roles.first()?;
            roles
                .iter()
                .all(|a| !a.data_path)
                .then(|| (dev.clone(), first.why.clone()))
        })
        .collect())
}

/// The result of a transfer check for the management devices it leaves alone (see [`management_devices`]).
pub fn management_left_alone(id: &str, devices: &[(String, String)]) -> CheckResult {
    let mut r = CheckResult::skip(
        id,
        format!(
            "{} management device(s) left alone: they carry no job's data",
            devices.len()
        ),
    );
    for (dev, why) in devices {
        r = r.evidence(dev, why);
    }
    r.code(&common::MANAGEMENT_LEFT_ALONE)
}

/// The device-wide part of [`Signs`], read once per device.
struct DeviceSigns {
    model: Option<String>,
    efa: bool,
    netvsc: Option<String>,
    bond: bool,
}

impl DeviceSigns {
    /// Each sign read strictly: a file that is there but cannot be read is the error (it may be the sign that
    /// takes a port out of the rails); a missing one is no sign.
    fn read(
        host: &Host,
        dev: &str,
        bdf: Option<&str>,
        tree: &PciTree,
    ) -> Result<DeviceSigns, ReadError> {
        let model = infiniband::read_hca_type(host, dev)?;
        // A model is a name (`MT4129`, `I40IW`): anything else is a damaged file, not another model.
        if let Some(m) = model.as_deref().filter(|m| {
            !m.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        }) {
            return Err(ReadError {
                path: format!("{}/hca_type", infiniband::device_dir(dev)),
                kind: crate::host::ReadErrorKind::Other(format!("not an HCA model: {m:?}")),
            });
        }
        let efa = bdf.and_then(|b| tree.find(b)).is_some_and(|i| {
            crate::sysfs::efa::is_efa(tree.nodes[i].attrs.vendor, tree.nodes[i].attrs.device)
        });
        let dir = infiniband::device_dir(dev);
        let mut masters: Vec<(String, String)> = Vec::new();
        for n in optional(host.read_dir(&format!("{dir}/device/net")))?.unwrap_or_default() {
            if let Some(master) = link_name(host, &format!("{CLASS_NET}/{n}/master"))? {
                masters.push((n, master));
            }
        }
        let mut netvsc = None;
        for (n, m) in &masters {
            if link_name(host, &format!("{CLASS_NET}/{m}/device/driver"))?.as_deref()
                == Some(NETVSC_DRIVER)
            {
                netvsc = Some(format!("{n} under {m}"));
            }
        }
        let bond = dev.contains("_bond")
            || masters
                .iter()
                .any(|(_, m)| host.is_dir(&format!("{CLASS_NET}/{m}/bonding")));
        Ok(DeviceSigns {
            model,
            efa,
            netvsc,
            bond,
        })
    }

    /// A link layer that is there and cannot be read, or is no link layer, is the error: another kind than
    /// the rails' would make a rail a front-end port.
    fn of_port(&self, port: &PortAttrs) -> Result<Signs, ReadError> {
        Ok(Signs {
            link_layer: port.link_layer_sign()?.map(str::to_string),
            model: self.model.clone(),
            efa: self.efa,
            netvsc: self.netvsc.clone(),
            bond: self.bond,
        })
    }
}

/// The last component of a link's target; None where there is no link.
fn link_name(host: &Host, path: &str) -> Result<Option<String>, ReadError> {
    Ok(optional(host.read_link(path))?.and_then(|t| t.rsplit('/').next().map(str::to_string)))
}

/// The ports with their use, and the PCI tree the roles were placed on (none where `NCCL_IB_HCA` decided).
pub struct Ports {
    pub devices: Vec<(String, Vec<(PortAttrs, Use)>)>,
    placed_on: Option<PciTree>,
}

impl Ports {
    /// `results` of check `id`, with the tree's error added where part of it could not be read: a GPU or NIC
    /// not read may change which ports are compute.
    pub fn completed(&self, id: &str, results: Vec<CheckResult>) -> Vec<CheckResult> {
        match &self.placed_on {
            Some(tree) => tree.completed(id, GPU_NIC_PATHS, results),
            None => results,
        }
    }

    /// Every PCI function that could decide a port's role was read: a count of storage ports can be trusted.
    pub fn fully_placed(&self) -> bool {
        self.placed_on
            .as_ref()
            .is_none_or(|tree| tree.unread_of(GPU_NIC_PATHS).is_empty())
    }
}

/// The role of each of `ports`, in their order, or what decides it and could not be read. `nccl_ib_hca` is the
/// variable's value where set; `rails` the profile's count of compute ports; `tree` the PCI tree where it could
/// be read.
pub fn assign(
    ports: &[PortRef],
    nccl_ib_hca: Option<&str>,
    rails: Option<u32>,
    tree: Option<&PciTree>,
) -> Vec<Placed> {
    if let Some(value) = nccl_ib_hca.filter(|v| !v.trim().is_empty()) {
        let list = IfList::parse(value);
        return ports
            .iter()
            .map(|p| {
                let keeps = list.keeps(&p.device, Some(p.port));
                Ok(Assigned {
                    role: if keeps { Role::Compute } else { Role::Storage },
                    why: format!(
                        "NCCL_IB_HCA={value} {} it",
                        if keeps { "keeps" } else { "leaves out" }
                    ),
                    data_path: true,
                })
            })
            .collect();
    }
    let fronts = front_end(ports);
    let candidates: Vec<PortRef> = ports
        .iter()
        .zip(&fronts)
        .filter(|(_, f)| f.is_none())
        .map(|(p, _)| p.clone())
        .collect();
    let mut placed = tree
        .and_then(|t| by_placement(&candidates, rails, t))
        .unwrap_or_else(|| {
            candidates
                .iter()
                .map(|_| {
                    Ok(compute(
                        "no GPU to place rails by, and NCCL_IB_HCA unset: every port",
                    ))
                })
                .collect()
        })
        .into_iter();
    fronts
        .into_iter()
        .map(|f| match f {
            Some(a) => Ok(a),
            None => placed.next().expect("one role per candidate"),
        })
        .collect()
}

fn compute(why: impl Into<String>) -> Assigned {
    Assigned {
        role: Role::Compute,
        why: why.into(),
        data_path: true,
    }
}

fn storage(why: impl Into<String>) -> Assigned {
    Assigned {
        role: Role::Storage,
        why: why.into(),
        data_path: true,
    }
}

fn management(why: impl Into<String>) -> Assigned {
    Assigned {
        role: Role::Storage,
        why: why.into(),
        data_path: false,
    }
}

/// A port's kind: (link layer, model).
type Kind = (Option<String>, Option<String>);

/// Rule 2: per port, its front-end or management role where the device shows one; None where placement decides.
fn front_end(ports: &[PortRef]) -> Vec<Option<Assigned>> {
    let marked: Vec<Option<Assigned>> = ports
        .iter()
        .map(|p| {
            p.signs.netvsc.as_ref().map(|pair| {
                management(format!(
                    "accelerated-networking VF of the VM's front end ({pair}, {NETVSC_DRIVER}): carries no NCCL traffic"
                ))
            })
        })
        .collect();
    // The rails' kind: the most common (link layer, model) among the rest, held by 2 ports or more and by more
    // ports than any other kind. Without one (a single port, an even split) placement decides.
    let kind = |p: &PortRef| -> Kind { (p.signs.link_layer.clone(), p.signs.model.clone()) };
    let rest: Vec<&PortRef> = ports
        .iter()
        .zip(&marked)
        .filter(|(_, m)| m.is_none())
        .map(|(p, _)| p)
        .collect();
    let mut counts: Vec<(Kind, usize)> = Vec::new();
    for p in &rest {
        match counts.iter_mut().find(|(k, _)| *k == kind(p)) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind(p), 1)),
        }
    }
    counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let rails = match counts.as_slice() {
        [(k, n), ..] if *n >= 2 && counts.get(1).is_none_or(|(_, m)| m < n) => {
            Some((k.clone(), *n))
        }
        _ => None,
    };
    let rails_efa = rails
        .as_ref()
        .is_some_and(|(k, _)| rest.iter().filter(|p| kind(p) == *k).all(|p| p.signs.efa));
    ports
        .iter()
        .zip(marked)
        .map(|(p, m)| {
            let ((rail_layer, rail_model), n) = rails.as_ref()?;
            m.or_else(|| {
                odd_one_out(
                    p,
                    rail_layer.as_deref(),
                    rail_model.as_deref(),
                    *n,
                    rails_efa,
                )
            })
        })
        .collect()
}

/// A port that is not of the rails' kind and shows why it is not one of them.
fn odd_one_out(
    p: &PortRef,
    rail_layer: Option<&str>,
    rail_model: Option<&str>,
    rails: usize,
    rails_efa: bool,
) -> Option<Assigned> {
    let layer = p.signs.link_layer.as_deref();
    let model = p.signs.model.as_deref();
    let rail_model = rail_model.unwrap_or("unknown model");
    match (layer, rail_layer) {
        (Some(l), Some(r)) if l != r && rails_efa && !p.signs.efa => Some(management(format!(
            "{l} port beside {rails} EFA rails: not an EFA (p6-b200's NVLink switch management ports sit so): not a data path"
        ))),
        (Some(l), Some(r)) if l != r => Some(storage(format!(
            "link layer {l} beside {rails} {r} rails ({rail_model}): front end or storage, not a rail"
        ))),
        _ if p.signs.bond && model != Some(rail_model) => Some(storage(format!(
            "a bond of another model ({}) beside {rails} rails ({rail_model}): front end or storage, not a rail",
            model.unwrap_or("unknown model")
        ))),
        _ => None,
    }
}

/// Rule 3; `None` where the tree shows no GPU. Where a function that could be a GPU, a NIC or a port between
/// them could not be read, a port placement leaves storage (it may be that GPU's nearest) or that is not on the
/// tree though it has a PCI function has no role: the unread functions are named.
fn by_placement(ports: &[PortRef], rails: Option<u32>, tree: &PciTree) -> Option<Vec<Placed>> {
    let gpus = tree.with_role(PciRole::Gpu);
    if gpus.is_empty() {
        return None;
    }
    let unread: Vec<String> = tree
        .unread_of(GPU_NIC_PATHS)
        .into_iter()
        .map(|u| u.line.clone())
        .collect();
    let functions: Vec<Option<usize>> = ports
        .iter()
        .map(|p| p.bdf.as_deref().and_then(|b| tree.find(b)))
        .collect();
    // Per port: the GPU that has it among its nearest, and at what distance (the least such, first GPU).
    let mut nearest_of: Vec<Option<(PcieDistance, usize)>> = vec![None; ports.len()];
    for &gpu in &gpus {
        let distances: Vec<(usize, PcieDistance)> = functions
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.map(|f| (i, tree.distance(gpu, f))))
            .collect();
        let only: Vec<PcieDistance> = distances.iter().map(|(_, d)| *d).collect();
        let Some(best) = topology::nearest(&only).map(|k| only[k]) else {
            continue;
        };
        for (i, d) in distances {
            if d == best && nearest_of[i].is_none_or(|(held, _)| d < held) {
                nearest_of[i] = Some((d, gpu));
            }
        }
    }
    // With a rail count, the nearest candidates first (then in name order) up to that count.
    let mut candidates: Vec<usize> = (0..ports.len())
        .filter(|&i| nearest_of[i].is_some())
        .collect();
    candidates.sort_by(|&a, &b| {
        nearest_of[a]
            .map(|(d, _)| d)
            .cmp(&nearest_of[b].map(|(d, _)| d))
            .then_with(|| natural_cmp(&ports[a].device, &ports[b].device))
            .then(ports[a].port.cmp(&ports[b].port))
    });
    let keep = rails.map_or(candidates.len(), |n| candidates.len().min(n as usize));
    let kept = &candidates[..keep];
    let assigned = (0..ports.len())
        .map(|i| {
            let a = match (nearest_of[i], functions[i]) {
                (Some((d, gpu)), _) if kept.contains(&i) => compute(format!(
                    "nearest RDMA port of {} ({d:?})",
                    tree.subject(gpu)
                )),
                (Some((d, gpu)), _) => storage(format!(
                    "nearest port of {} ({d:?}), but the profile's {} rail(s) are nearer",
                    tree.subject(gpu),
                    rails.unwrap_or_default()
                )),
                (None, Some(_)) => storage("no GPU has it as its nearest RDMA port"),
                (None, None) => {
                    compute("not on the PCI tree (a software device): judged as a rail")
                }
            };
            let unplaced =
                a.role == Role::Storage || (functions[i].is_none() && ports[i].bdf.is_some());
            if unplaced && !unread.is_empty() {
                Err(unread.clone())
            } else {
                Ok(a)
            }
        })
        .collect();
    Some(assigned)
}

/// Per port of one device (`ports` all of the same device): disabled by design, i.e. `phys_state` Disabled
/// while a sibling port is ACTIVE and LinkUp. A ConnectX-8 in multi-plane mode shows 12 ports of which the
/// platform disables all but the data planes (scitix/sichek PR #98); an unused port of a multi-port device
/// reads DOWN / DISABLED (Mellanox/mkt PR #59). A port left without a peer reads Polling, not Disabled, and a
/// device whose every port is Disabled has no data port at all: both are still judged.
pub fn disabled_by_design(ports: &[&PortAttrs]) -> Vec<bool> {
    let any_up = ports.iter().any(|p| p.is_active() && p.is_link_up());
    ports.iter().map(|p| any_up && is_disabled(p)).collect()
}

fn is_disabled(port: &PortAttrs) -> bool {
    port.phys_state
        .as_deref()
        .ok()
        .and_then(parse_numbered)
        .is_some_and(|(n, _)| n == PHYS_DISABLED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;
    use crate::probes::testing::damaged_copy;
    use std::path::Path;

    fn tree(scenario: &str) -> PciTree {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/hosts")
            .join(scenario);
        PciTree::read(&Host::at(&root).unwrap()).unwrap()
    }

    fn port(device: &str, bdf: Option<&str>) -> PortRef {
        PortRef {
            device: device.into(),
            port: 1,
            bdf: bdf.map(str::to_string),
            ..PortRef::default()
        }
    }

    /// The bond on its own root port is no GPU's nearest port: storage; each rail is its GPU's.
    fn bond_node() -> (PciTree, Vec<PortRef>) {
        let t = tree("h100-ib-bond0-storage");
        let mut ports: Vec<PortRef> = t
            .rdma_nics()
            .into_iter()
            .flat_map(|i| {
                let bdf = t.nodes[i].bdf.to_string();
                t.nodes[i]
                    .rdma_devices
                    .iter()
                    .map(|d| port(d, Some(&bdf)))
                    .collect::<Vec<_>>()
            })
            .collect();
        ports.sort_by(|a, b| natural_cmp(&a.device, &b.device));
        (t, ports)
    }

    /// [`assign`]'s roles where every fact was read.
    fn placed(
        ports: &[PortRef],
        nccl_ib_hca: Option<&str>,
        rails: Option<u32>,
        tree: Option<&PciTree>,
    ) -> Vec<Assigned> {
        assign(ports, nccl_ib_hca, rails, tree)
            .into_iter()
            .map(|p| p.expect("every fact read"))
            .collect()
    }

    fn roles(assigned: &[Assigned]) -> Vec<&'static str> {
        assigned.iter().map(|a| a.role.as_str()).collect()
    }

    #[test]
    fn placement_makes_rails_compute_and_the_bond_storage() {
        let (t, ports) = bond_node();
        assert_eq!(ports.last().unwrap().device, "mlx5_bond_0");
        for rails in [None, Some(8)] {
            let a = placed(&ports, None, rails, Some(&t));
            assert_eq!(roles(&a)[..8], ["compute"; 8]);
            assert_eq!(a[8].role, Role::Storage, "{a:?}");
            assert_eq!(a[0].why, "nearest RDMA port of GPU0 0000:18:00.0 (PIX)");
        }
        // A rail count below the nearest ports keeps the nearest ones, in name order.
        let a = placed(&ports, None, Some(4), Some(&t));
        assert_eq!(
            roles(&a)[..5],
            ["compute", "compute", "compute", "compute", "storage"]
        );
    }

    #[test]
    fn nccl_ib_hca_decides_in_nccls_syntax() {
        let (t, ports) = bond_node();
        for (hca, bond) in [
            (
                "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
                Role::Storage,
            ),
            ("^mlx5_bond", Role::Storage),
            (
                "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1",
                Role::Storage,
            ),
            ("mlx5", Role::Compute),
            ("mlx5_bond_0:1", Role::Compute),
        ] {
            let a = placed(&ports, Some(hca), Some(8), Some(&t));
            assert_eq!(a[8].role, bond, "{hca}");
            assert!(
                a[8].why.starts_with(&format!("NCCL_IB_HCA={hca} ")),
                "{a:?}"
            );
        }
        let a = placed(&ports, Some("mlx5_bond_0:2"), None, Some(&t));
        assert!(a.iter().all(|a| a.role == Role::Storage), "{a:?}");
    }

    #[test]
    fn without_gpus_every_port_is_compute() {
        let t = tree("rxe-vm");
        let a = placed(&[port("rxe0", None)], None, Some(8), Some(&t));
        assert_eq!(roles(&a), ["compute"]);
        let a = placed(&[port("rxe0", None)], None, None, None);
        assert_eq!(roles(&a), ["compute"]);
    }

    fn host(scenario: &str) -> Host {
        Host::at(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/hosts")
                .join(scenario),
        )
        .unwrap()
    }

    /// Each device's (role, data path, why) as [`read`] assigns them.
    fn read_roles(scenario: &str, rails: Option<u32>) -> Vec<(String, Role, bool, String)> {
        read(&host(scenario), None, rails)
            .unwrap()
            .devices
            .into_iter()
            .flat_map(|(dev, ports)| {
                ports.into_iter().filter_map(move |(_, u)| match u {
                    Use::Role(a) => Some((dev.clone(), a.role, a.data_path, a.why)),
                    Use::DisabledByDesign => None,
                    Use::Unplaced(unread) => panic!("{dev}: unplaced: {unread:?}"),
                })
            })
            .collect()
    }

    /// Reproduced: p6-b200's two InfiniBand NVLink switch management functions, under a GPU's switch, were that
    /// GPU's nearest ports: compute rails beside the 8 EFAs, and looped back. Told by their InfiniBand beside
    /// the EFA rails, with or without the VPD file a root run could read.
    #[test]
    fn p6_b200_nvlink_management_ports_are_not_rails() {
        for (scenario, why) in [
            ("aws-p6-b200", "InfiniBand port beside 8 EFA rails"),
            (
                "aws-p6-b200-vpd-unread",
                "InfiniBand port beside 8 EFA rails",
            ),
        ] {
            let roles = read_roles(scenario, Some(8));
            assert_eq!(roles.len(), 10, "{roles:#?}");
            let (managers, rails): (Vec<_>, Vec<_>) =
                roles.iter().partition(|(d, ..)| d.starts_with("ibp"));
            assert_eq!(managers.len(), 2);
            for (dev, role, data_path, text) in managers {
                assert_eq!((*role, *data_path), (Role::Storage, false), "{dev}: {text}");
                assert!(text.contains(why), "{scenario} {dev}: {text}");
            }
            assert!(
                rails.iter().all(|(_, r, d, _)| *r == Role::Compute && *d),
                "{rails:#?}"
            );
            let left = management_devices(&host(scenario)).unwrap();
            let names: Vec<&str> = left.iter().map(|(d, _)| d.as_str()).collect();
            assert_eq!(names, ["ibp124s0f0", "ibp140s0f0"], "{scenario}");
        }
    }

    /// Reproduced: Azure's accelerated-networking VF `mlx5_an0` (Ethernet, MTU 1500) sits on a vPCI domain of
    /// its own, as near to every GPU as the rails: it was a compute rail. Its netdev enslaved to Hyper-V's
    /// netvsc makes it the VM's front end; without that link (a container's view) its Ethernet beside the
    /// InfiniBand rails still does.
    #[test]
    fn azure_accelerated_networking_vf_is_front_end() {
        for (scenario, why, data_path) in [
            (
                "azure-nd-h100-v5",
                "enP30832s1 under eth0, hv_netvsc",
                false,
            ),
            (
                "azure-nd-h100-v5-an-alone",
                "link layer Ethernet beside 8 InfiniBand rails (MT4129)",
                true,
            ),
        ] {
            let roles = read_roles(scenario, Some(8));
            let an = roles
                .iter()
                .find(|(d, ..)| d == "mlx5_an0")
                .expect("mlx5_an0");
            assert_eq!((an.1, an.2), (Role::Storage, data_path), "{an:?}");
            assert!(an.3.contains(why), "{scenario}: {}", an.3);
            let rails: Vec<_> = roles.iter().filter(|(d, ..)| d != "mlx5_an0").collect();
            assert_eq!(rails.len(), 8);
            assert!(
                rails.iter().all(|(_, r, ..)| *r == Role::Compute),
                "{rails:#?}"
            );
        }
        // NCCL_IB_HCA still decides over what the devices show.
        let ports = read(&host("azure-nd-h100-v5"), Some("mlx5"), None).unwrap();
        let (_, an) = ports.devices.iter().find(|(d, _)| d == "mlx5_an0").unwrap();
        assert!(matches!(&an[0].1, Use::Role(a) if a.role == Role::Compute));
    }

    /// Reproduced: a capture of /sys/class/infiniband alone (no `device` links, no PCI tree) judged the
    /// BlueField-3 bond a ninth rail. Told apart by kind: another link layer than the IB rails, or, beside RoCE
    /// rails, a bond of another model.
    #[test]
    fn without_a_pci_tree_the_bond_is_told_by_its_kind() {
        for (scenario, why) in [
            (
                "ib-class-only-bond",
                "link layer Ethernet beside 8 InfiniBand rails (MT4129)",
            ),
            (
                "ib-class-only-roce-bond",
                "a bond of another model (MT41692) beside 8 rails (MT4129)",
            ),
        ] {
            for rails in [None, Some(8)] {
                let roles = read_roles(scenario, rails);
                assert_eq!(roles.len(), 9);
                let (dev, role, data_path, text) = &roles[8];
                assert_eq!(
                    (dev.as_str(), *role, *data_path),
                    ("mlx5_bond_0", Role::Storage, true)
                );
                assert!(text.contains(why), "{scenario}: {text}");
                assert!(
                    roles[..8].iter().all(|(_, r, ..)| *r == Role::Compute),
                    "{roles:#?}"
                );
            }
        }
    }

    fn signed(device: &str, layer: &str, model: &str, bond: bool) -> PortRef {
        PortRef {
            signs: Signs {
                link_layer: Some(layer.into()),
                model: Some(model.into()),
                bond,
                ..Signs::default()
            },
            ..port(device, None)
        }
    }

    /// Kind alone decides nothing without a clear majority, and a port of the rails' kind, or of another
    /// model that shows no front-end sign, stays where placement puts it.
    #[test]
    fn kinds_without_a_majority_or_a_sign_leave_ports_to_placement() {
        let ib = |d: &str, m: &str| signed(d, "InfiniBand", m, false);
        let cases: Vec<Vec<PortRef>> = vec![
            // an even split of models
            vec![
                ib("a", "MT4129"),
                ib("b", "MT4129"),
                ib("c", "MT4123"),
                ib("d", "MT4123"),
            ],
            // one port alone
            vec![signed("a", "Ethernet", "MT41692", true)],
            // another model, same link layer, no bond: a rail of an older card
            vec![ib("a", "MT4129"), ib("b", "MT4129"), ib("c", "MT4123")],
            // an even split of link layers (iWARP beside RoCE is Ethernet both; IB beside RoCE here)
            vec![ib("a", "MT4129"), signed("b", "Ethernet", "MT4129", false)],
        ];
        for ports in cases {
            let a = placed(&ports, None, None, None);
            assert!(
                a.iter().all(|a| a.role == Role::Compute && a.data_path),
                "{a:?}"
            );
        }
    }

    #[test]
    fn equally_near_ports_are_all_compute() {
        // Every NIC on the other socket: all at SYS from every GPU, so NCCL spreads over all of them.
        let t = tree("nic-cross-socket");
        let ports: Vec<PortRef> = t
            .rdma_nics()
            .into_iter()
            .map(|i| {
                port(
                    &t.nodes[i].rdma_devices[0],
                    Some(&t.nodes[i].bdf.to_string()),
                )
            })
            .collect();
        assert_eq!(ports.len(), 8);
        let a = placed(&ports, None, None, Some(&t));
        assert!(a.iter().all(|a| a.role == Role::Compute), "{a:?}");
    }

    /// Each port's use as [`read`] gives it, by `dev/port`.
    fn uses(root: &Path, nccl_ib_hca: Option<&str>, rails: Option<u32>) -> Vec<(String, Use)> {
        read(&Host::at(root).unwrap(), nccl_ib_hca, rails)
            .unwrap()
            .devices
            .into_iter()
            .flat_map(|(dev, ports)| {
                ports
                    .into_iter()
                    .map(move |(p, u)| (format!("{dev}/{}", p.port), u))
            })
            .collect()
    }

    /// The ports without a role, each with the first file named.
    fn unplaced_ports(uses: &[(String, Use)]) -> Vec<(&str, &str)> {
        uses.iter()
            .filter_map(|(p, u)| match u {
                Use::Unplaced(unread) => Some((p.as_str(), unread[0].as_str())),
                _ => None,
            })
            .collect()
    }

    const BOND_GPU0: &str = "/sys/bus/pci/devices/0000:18:00.0";

    /// Reproduced (issue 31's Blackwell trees, the damage sweep): a GPU whose `class` or `numa_node` could not
    /// be read was no GPU, so its rail was "no GPU's nearest port", a storage port whose down link only warned.
    /// Now every port placement would make storage (the GPU may be its) has no role, naming the file; the rails
    /// of the GPUs read keep theirs, the bond its front-end role, and NCCL_IB_HCA still decides without the
    /// tree.
    #[test]
    fn an_unread_gpu_class_or_numa_node_leaves_the_ports_it_could_own_unplaced() {
        for (file, text) in [
            ("class", None),
            ("class", Some("garbage?\n")),
            ("numa_node", None),
            ("numa_node", Some("garbage?\n")),
        ] {
            let path = format!("{BOND_GPU0}/{file}");
            let dir = damaged_copy("h100-ib-bond0-storage", &path, text);
            let all = uses(dir.path(), None, Some(8));
            let unplaced = unplaced_ports(&all);
            assert!(!unplaced.is_empty(), "{file} {text:?}: {all:#?}");
            assert!(
                unplaced.iter().any(|(p, _)| *p == "mlx5_0/1"),
                "{file} {text:?}: GPU0's rail: {unplaced:?}"
            );
            for (port, line) in &unplaced {
                assert!(
                    line.contains(&format!("0000:18:00.0/{file}")),
                    "{port}: {line}"
                );
            }
            // No port is storage by placement; the bond still is by its kind, which no GPU changes.
            for (port, u) in &all {
                if let Use::Role(a) = u {
                    assert!(
                        a.role == Role::Compute
                            || (port == "mlx5_bond_0/1"
                                && a.why.contains("beside 8 InfiniBand rails")),
                        "{port}: {a:?}"
                    );
                }
            }
            let by_hca = uses(
                dir.path(),
                Some("=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"),
                Some(8),
            );
            assert!(unplaced_ports(&by_hca).is_empty(), "{by_hca:#?}");
        }
    }

    /// A NIC whose own function could not be read is not "a software device judged as a rail": its place is
    /// unknown.
    #[test]
    fn an_unread_nic_function_leaves_its_port_unplaced() {
        let dir = damaged_copy(
            "h100-ib-bond0-storage",
            "/sys/bus/pci/devices/0000:19:00.0/class",
            None,
        );
        let all = uses(dir.path(), None, Some(8));
        let unplaced = unplaced_ports(&all);
        assert!(
            unplaced
                .iter()
                .any(|(p, l)| *p == "mlx5_0/1" && l.contains("0000:19:00.0/class")),
            "{all:#?}"
        );
    }

    /// A port's link layer that could not be read, or holds no link layer the kernel writes, is the error
    /// naming it: garbage would be another kind than the rails' ("link layer garbage? beside 8 InfiniBand
    /// rails": a storage port).
    #[test]
    fn an_unread_link_layer_is_an_error_naming_it() {
        for (dev, text) in [
            ("mlx5_3", None),
            ("mlx5_3", Some("garbage?\n")),
            ("mlx5_bond_0", None),
            ("mlx5_bond_0", Some("garbage?\n")),
        ] {
            let path = format!("/sys/class/infiniband/{dev}/ports/1/link_layer");
            let dir = damaged_copy("ib-class-only-bond", &path, text);
            let Err(e) = read(&Host::at(dir.path()).unwrap(), None, Some(8)) else {
                panic!("{dev} {text:?}: read");
            };
            assert!(
                e.path.ends_with(&format!("{dev}/ports/1/link_layer")),
                "{e:?}"
            );
        }
        // The same port seen by the rule alone: no link layer sign, no error.
        let missing = PortAttrs {
            link_layer: Err(ReadError {
                path: "link_layer".into(),
                kind: crate::host::ReadErrorKind::NotFound,
            }),
            ..crate::sysfs::infiniband::read_port(&host("ib-class-only-bond"), "mlx5_3", 1)
        };
        assert_eq!(missing.link_layer_sign(), Ok(None));
    }
}
