//! What each RDMA port is for: a **compute** rail (NCCL's traffic) or a **storage**/frontend port (storage,
//! in-band, management), and which ports of a multi-port device are off by design. Pure: callers read the
//! ports, the PCI tree and the settings; the rule is here, and every reader (`rdma.link`, `rdma.roce`, `topo`)
//! applies the same one.
//!
//! The rule, first that applies:
//! 1. `NCCL_IB_HCA` is set: the ports it keeps, in NCCL's syntax (prefix by default, `=` exact, `^` exclude,
//!    `dev:port`), are compute; the others storage.
//! 2. GPUs are on the PCI bus: each GPU's nearest ports (the least PCIe distance, all of equals, as NCCL's
//!    topology search prefers) are compute; a port that is no GPU's nearest is storage. Where the profile names
//!    a rail count and more ports than that are nearest to some GPU, the nearest ones are kept.
//! 3. Otherwise every port is compute.

use crate::host::{Host, ReadError};
use crate::nccl::env::IfList;
use crate::probe::CheckResult;
use crate::sysfs::infiniband::{self, natural_cmp, parse_numbered, PortAttrs};
use crate::topology::PcieDistance;
use crate::topology::{self, PciTree, Role as PciRole, GPU_NIC_PATHS};

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

/// One port to classify: its device, number and PCI function (none for a software device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRef {
    pub device: String,
    pub port: u32,
    pub bdf: Option<String>,
}

/// A port's role and why it has it (shown as evidence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    pub role: Role,
    pub why: String,
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
        let flags = disabled_by_design(&ports.iter().collect::<Vec<_>>());
        for (p, disabled) in ports.iter().zip(flags) {
            off.push(disabled);
            if !disabled {
                refs.push(PortRef {
                    device: dev.clone(),
                    port: p.port,
                    bdf: bdf.clone(),
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
                        Use::Role(roles.next().expect("one role per port judged"))
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
}

/// The role of each of `ports`, in their order. `nccl_ib_hca` is the variable's value where set; `rails` the
/// profile's count of compute ports; `tree` the PCI tree where it could be read.
pub fn assign(
    ports: &[PortRef],
    nccl_ib_hca: Option<&str>,
    rails: Option<u32>,
    tree: Option<&PciTree>,
) -> Vec<Assigned> {
    if let Some(value) = nccl_ib_hca.filter(|v| !v.trim().is_empty()) {
        let list = IfList::parse(value);
        return ports
            .iter()
            .map(|p| {
                let keeps = list.keeps(&p.device, Some(p.port));
                Assigned {
                    role: if keeps { Role::Compute } else { Role::Storage },
                    why: format!(
                        "NCCL_IB_HCA={value} {} it",
                        if keeps { "keeps" } else { "leaves out" }
                    ),
                }
            })
            .collect();
    }
    let placed = tree.and_then(|t| by_placement(ports, rails, t));
    placed.unwrap_or_else(|| {
        ports
            .iter()
            .map(|_| Assigned {
                role: Role::Compute,
                why: "no GPU to place rails by, and NCCL_IB_HCA unset: every port".into(),
            })
            .collect()
    })
}

/// Rule 2; `None` where the tree shows no GPU.
fn by_placement(ports: &[PortRef], rails: Option<u32>, tree: &PciTree) -> Option<Vec<Assigned>> {
    let gpus = tree.with_role(PciRole::Gpu);
    if gpus.is_empty() {
        return None;
    }
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
    let compute = &candidates[..keep];
    let assigned = (0..ports.len())
        .map(|i| match (nearest_of[i], functions[i]) {
            (Some((d, gpu)), _) if compute.contains(&i) => Assigned {
                role: Role::Compute,
                why: format!("nearest RDMA port of {} ({d:?})", tree.subject(gpu)),
            },
            (Some((d, gpu)), _) => Assigned {
                role: Role::Storage,
                why: format!(
                    "nearest port of {} ({d:?}), but the profile's {} rail(s) are nearer",
                    tree.subject(gpu),
                    rails.unwrap_or_default()
                ),
            },
            (None, Some(_)) => Assigned {
                role: Role::Storage,
                why: "no GPU has it as its nearest RDMA port".into(),
            },
            (None, None) => Assigned {
                role: Role::Compute,
                why: "not on the PCI tree (a software device): judged as a rail".into(),
            },
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

    fn roles(assigned: &[Assigned]) -> Vec<&'static str> {
        assigned.iter().map(|a| a.role.as_str()).collect()
    }

    #[test]
    fn placement_makes_rails_compute_and_the_bond_storage() {
        let (t, ports) = bond_node();
        assert_eq!(ports.last().unwrap().device, "mlx5_bond_0");
        for rails in [None, Some(8)] {
            let a = assign(&ports, None, rails, Some(&t));
            assert_eq!(roles(&a)[..8], ["compute"; 8]);
            assert_eq!(a[8].role, Role::Storage, "{a:?}");
            assert_eq!(a[0].why, "nearest RDMA port of GPU0 0000:18:00.0 (PIX)");
        }
        // A rail count below the nearest ports keeps the nearest ones, in name order.
        let a = assign(&ports, None, Some(4), Some(&t));
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
            let a = assign(&ports, Some(hca), Some(8), Some(&t));
            assert_eq!(a[8].role, bond, "{hca}");
            assert!(
                a[8].why.starts_with(&format!("NCCL_IB_HCA={hca} ")),
                "{a:?}"
            );
        }
        let a = assign(&ports, Some("mlx5_bond_0:2"), None, Some(&t));
        assert!(a.iter().all(|a| a.role == Role::Storage), "{a:?}");
    }

    #[test]
    fn without_gpus_every_port_is_compute() {
        let t = tree("rxe-vm");
        let a = assign(&[port("rxe0", None)], None, Some(8), Some(&t));
        assert_eq!(roles(&a), ["compute"]);
        let a = assign(&[port("rxe0", None)], None, None, None);
        assert_eq!(roles(&a), ["compute"]);
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
        let a = assign(&ports, None, None, Some(&t));
        assert!(a.iter().all(|a| a.role == Role::Compute), "{a:?}");
    }
}
