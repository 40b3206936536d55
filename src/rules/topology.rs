//! One model of the PCIe tree, built from `/sys/bus/pci/devices` and the canonical sysfs path of each function
//! (`/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0`): the chain of parent
//! directories is the path from the host bridge through root port and switch ports to the device.
//!
//! Readers: `pcie.link` (links on each path), `pcie.acs` (ports between peers), `topo.gpu_nic` and the `topo`
//! command (distance labels). No verdicts here.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::host::{Host, ReadError};
use crate::model::finding::common;
use crate::model::{CheckResult, Status};
use crate::sysfs::infiniband;
use crate::sysfs::pci::{self, Bdf, Link, LinkSpeed, PciAttrs};
use crate::sysfs::pci_config::{self, PortType};
use crate::sysfs::pci_ids;

/// `nvidia-smi topo -m` distance labels, nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PcieDistance {
    PIX,
    PXB,
    PHB,
    NODE,
    SYS,
}

/// Unreadable functions named one by one in evidence; the rest are counted.
const MAX_UNREADABLE_SHOWN: usize = 8;

/// What a function is for the data paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Gpu,
    /// A network function with an RDMA device (or a Mellanox function whose RDMA driver is not bound).
    Nic,
    Nvme,
    RootPort,
    SwitchUpstream,
    SwitchDownstream,
    /// Anything else (host bridges, NVSwitches, virtio, management endpoints).
    Other,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Gpu => "GPU",
            Role::Nic => "NIC",
            Role::Nvme => "NVMe",
            Role::RootPort => "root port",
            Role::SwitchUpstream => "switch upstream port",
            Role::SwitchDownstream => "switch downstream port",
            Role::Other => "device",
        }
    }

    pub fn is_endpoint_of_interest(self) -> bool {
        matches!(self, Role::Gpu | Role::Nic | Role::Nvme)
    }
}

/// What a check looks for in the tree. A function that could not be read leaves the check incomplete only when
/// it could be one of these.
pub const GPUS: &[Role] = &[Role::Gpu];
pub const NICS: &[Role] = &[Role::Nic];
/// The devices of the data paths and the ports between them (links, ACS, distances).
pub const DATA_PATHS: &[Role] = &[
    Role::Gpu,
    Role::Nic,
    Role::Nvme,
    Role::RootPort,
    Role::SwitchUpstream,
    Role::SwitchDownstream,
];
/// The devices of the data paths themselves (IOMMU groups).
pub const DATA_ENDPOINTS: &[Role] = &[Role::Gpu, Role::Nic, Role::Nvme];
/// GPUs and NICs and the ports between them (GPU↔NIC distances).
pub const GPU_NIC_PATHS: &[Role] = &[
    Role::Gpu,
    Role::Nic,
    Role::RootPort,
    Role::SwitchUpstream,
    Role::SwitchDownstream,
];
const BRIDGES: &[Role] = &[Role::RootPort, Role::SwitchUpstream, Role::SwitchDownstream];
const ANYTHING: &[Role] = &[
    Role::Gpu,
    Role::Nic,
    Role::Nvme,
    Role::RootPort,
    Role::SwitchUpstream,
    Role::SwitchDownstream,
    Role::Other,
];

/// A PCI function (or the RDMA class directory) that could not be read in full.
#[derive(Debug, Clone, PartialEq)]
pub struct Unread {
    /// `path = reason`.
    pub line: String,
    /// What it could be, from what of it was read: its class and vendor decide whether it can be a GPU.
    pub could_be: Vec<Role>,
}

impl Unread {
    fn could_be_any(&self, roles: &[Role]) -> bool {
        self.could_be.iter().any(|r| roles.contains(r))
    }
}

#[derive(Debug, Clone)]
pub struct PciNode {
    pub bdf: Bdf,
    pub attrs: PciAttrs,
    /// Canonical sysfs directory.
    pub sysfs_path: String,
    /// `pci0000:15`: the host bridge (root complex) above the device.
    pub host_bridge: String,
    /// The upstream PCI function (the port above), None when the device sits on the host bridge.
    pub parent: Option<usize>,
    pub role: Role,
    /// From the PCI Express capability when the config space could be read.
    pub port_type: Option<PortType>,
    /// `GPU0`, `NIC3`, `NVMe1` for endpoints of interest; empty otherwise.
    pub label: String,
    /// RDMA devices (`mlx5_0`) whose `device` link points at this function.
    pub rdma_devices: Vec<String>,
    /// The adapter, for a Mellanox function in flash-recovery mode (its firmware did not boot).
    pub flash_recovery: Option<&'static str>,
}

/// The whole tree.
#[derive(Debug, Clone, Default)]
pub struct PciTree {
    pub nodes: Vec<PciNode>,
    /// Functions that could not be read, with what each could be.
    pub unreadable: Vec<Unread>,
    /// Attributes of functions in the tree that could not be read (`path = reason`): a link (its device's own
    /// error in pcie.link), a bridge's config space (its port type is then inferred from the tree).
    pub unread_attributes: Vec<String>,
}

/// One link on a device's path to its root port, judged by both of its ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathLink {
    /// The end facing the root: the device itself or a switch upstream port.
    pub lower: usize,
    /// The port above it (switch downstream port or root port); None for a device on the host bridge.
    pub upper: Option<usize>,
    pub current_speed: LinkSpeed,
    pub current_width: u32,
    /// The lower of the two ends' maxima: what the link can run at.
    pub capable_speed: LinkSpeed,
    pub capable_width: u32,
}

impl PathLink {
    /// Runs below what both of its ends support.
    pub fn is_degraded(&self) -> bool {
        let slow = match (self.current_speed, self.capable_speed) {
            (LinkSpeed::GtPerSec(cur), LinkSpeed::GtPerSec(cap)) => cur + 0.01 < cap,
            (LinkSpeed::Unknown, LinkSpeed::GtPerSec(_)) => true,
            _ => false,
        };
        slow || self.current_width < self.capable_width
    }

    /// At full width, and below what both ends support in speed alone (an idle GPU's link).
    pub fn is_slower_only(&self) -> bool {
        let slower = match (self.current_speed, self.capable_speed) {
            (LinkSpeed::GtPerSec(cur), LinkSpeed::GtPerSec(cap)) => cur + 0.01 < cap,
            _ => false,
        };
        slower && self.current_width >= self.capable_width
    }

    /// Bandwidth proxy (GT/s × lanes) to find the narrowest link.
    pub fn capacity(&self) -> f64 {
        self.current_speed.gts().unwrap_or(0.0) * f64::from(self.current_width)
    }

    pub fn describe(&self, tree: &PciTree) -> String {
        let ends = match self.upper {
            Some(u) => format!("{} → {}", tree.nodes[u].bdf, tree.nodes[self.lower].bdf),
            None => format!("host bridge → {}", tree.nodes[self.lower].bdf),
        };
        format!(
            "{ends}: {} x{} (capable {} x{})",
            self.current_speed, self.current_width, self.capable_speed, self.capable_width
        )
    }
}

impl PciTree {
    /// The host's PCIe tree, built once per host and shared by the probes of a run.
    pub fn read(host: &Host) -> Result<PciTree, ReadError> {
        host.shared(Self::build).as_ref().clone()
    }

    fn build(host: &Host) -> Result<PciTree, ReadError> {
        let bdfs = pci::read_bdfs(host)?;
        let mut tree = PciTree::default();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut paths: Vec<Vec<String>> = Vec::new();
        // RDMA devices by the function they sit on: a function with one is a NIC whatever its class.
        let mut rdma_on: HashMap<String, Vec<String>> = HashMap::new();
        match infiniband::read_device_names(host) {
            Ok(names) => {
                // A `device` link that cannot be resolved leaves the device's function unknown: the tree is
                // incomplete (it may be the NIC nearest a GPU), never a device without one.
                for name in names {
                    match infiniband::device_bdf(host, &name) {
                        Ok(Some(bdf)) => rdma_on.entry(bdf).or_default().push(name),
                        Ok(None) => {}
                        Err(e) => tree.unreadable.push(Unread {
                            line: format!("{} = {}", e.path, e.reason()),
                            could_be: NICS.to_vec(),
                        }),
                    }
                }
            }
            Err(e) => tree.unreadable.push(Unread {
                line: format!("{} = {}", e.path, e.reason()),
                could_be: NICS.to_vec(),
            }),
        }
        // Links named for a function other than the one they reach: the kernel names each link after its
        // function, so these are not functions of their own and are not counted twice.
        let mut aliases: Vec<(String, String)> = Vec::new();
        for bdf in bdfs {
            let name = bdf.to_string();
            let sysfs_path = match host.canonical(&pci::device_dir(&name)) {
                Ok(p) => p,
                Err(e) => {
                    tree.unreadable.push(Unread {
                        line: format!("{} = {}", e.path, e.reason()),
                        could_be: ANYTHING.to_vec(),
                    });
                    continue;
                }
            };
            if sysfs_path.rsplit('/').next() != Some(name.as_str()) {
                aliases.push((name, sysfs_path));
                continue;
            }
            let rdma_devices = rdma_on.remove(&name).unwrap_or_default();
            let attrs = match pci::read_attrs(host, bdf, &sysfs_path) {
                Ok(a) => a,
                Err(e) => {
                    tree.unreadable.push(Unread {
                        line: format!("{} = {}", e.path, e.reason()),
                        could_be: could_be(host, &sysfs_path, !rdma_devices.is_empty()),
                    });
                    continue;
                }
            };
            let components: Vec<String> = sysfs_path.split('/').map(str::to_string).collect();
            let host_bridge = components
                .iter()
                .find(|c| c.starts_with("pci") && c.contains(':'))
                .cloned()
                .unwrap_or_else(|| format!("pci{:04x}:??", bdf.domain));
            // An unreadable link is the device's own (pcie.link names it), not a function that may be missing.
            if let Link::Unreadable(path, why) = &attrs.link {
                tree.unread_attributes.push(format!("{path} = {why}"));
            }
            index.insert(name, tree.nodes.len());
            paths.push(components);
            let flash_recovery = pci_ids::flash_recovery(attrs.vendor, attrs.device);
            tree.nodes.push(PciNode {
                bdf,
                attrs,
                sysfs_path,
                host_bridge,
                parent: None,
                role: Role::Other,
                port_type: None,
                label: String::new(),
                flash_recovery,
                rdma_devices,
            });
        }
        if let Some((name, target)) = aliases.first() {
            // The tree was tampered with or mis-recorded: what else it holds cannot be trusted to be whole.
            tree.unreadable.push(Unread {
                line: format!(
                    "{} = <{} link(s) named for a function other than the one they reach, such as {name} → \
                     {target}: not counted as functions>",
                    pci::PCI_DEVICES,
                    aliases.len()
                ),
                could_be: ANYTHING.to_vec(),
            });
        }
        // The parent is the nearest ancestor directory that is itself a PCI function.
        for (i, components) in paths.iter().enumerate() {
            let own = components.len().saturating_sub(1);
            tree.nodes[i].parent = components[..own]
                .iter()
                .rev()
                .find_map(|c| index.get(c).copied());
        }
        for i in 0..tree.nodes.len() {
            if tree.nodes[i].attrs.is_bridge() {
                // Config space hidden from non-root users: the role is inferred from the tree's shape below.
                // Anything else that keeps the port type from being read leaves the tree incomplete.
                let port =
                    pci_config::read_config_at(host, &tree.nodes[i].sysfs_path).and_then(|c| {
                        c.pcie().map_err(|e| {
                            pci_config::ConfigReadError::Parse(
                                format!("{}/config", tree.nodes[i].sysfs_path),
                                e,
                            )
                        })
                    });
                // Unread, the port type is inferred from the tree's shape (as without root): the bridge is
                // known to be a bridge, and pcie.acs reads its config space itself.
                match port {
                    Ok(p) => tree.nodes[i].port_type = p.map(|p| p.port_type),
                    Err(e) if e.needs_root() => {}
                    Err(e) => tree
                        .unread_attributes
                        .push(format!("{e} (port type inferred from the tree)")),
                }
            }
        }
        // Parents before children: sysfs paths nest, so shorter paths first gives a valid order.
        let mut order: Vec<usize> = (0..tree.nodes.len()).collect();
        order.sort_by_key(|&i| paths[i].len());
        for i in order {
            tree.nodes[i].role = tree.classify(i);
        }
        let mut counters: HashMap<Role, usize> = HashMap::new();
        for node in &mut tree.nodes {
            if node.role.is_endpoint_of_interest() {
                let n = counters.entry(node.role).or_default();
                node.label = format!("{}{}", node.role.as_str(), n);
                *n += 1;
            }
        }
        Ok(tree)
    }

    fn classify(&self, i: usize) -> Role {
        let node = &self.nodes[i];
        let a = &node.attrs;
        if a.is_gpu() {
            return Role::Gpu;
        }
        if is_rdma_nic(a, !node.rdma_devices.is_empty()) {
            return Role::Nic;
        }
        if a.is_nvme() {
            return Role::Nvme;
        }
        if !a.is_bridge() {
            return Role::Other;
        }
        match node.port_type {
            Some(PortType::RootPort) => Role::RootPort,
            Some(PortType::SwitchUpstream) => Role::SwitchUpstream,
            Some(PortType::SwitchDownstream) => Role::SwitchDownstream,
            Some(_) => Role::Other,
            // Config space hidden (not root): infer from the position in the tree.
            None => match node.parent.map(|p| self.nodes[p].role) {
                None => Role::RootPort,
                Some(Role::RootPort | Role::SwitchDownstream) => Role::SwitchUpstream,
                Some(Role::SwitchUpstream) => Role::SwitchDownstream,
                Some(_) => Role::Other,
            },
        }
    }

    pub fn find(&self, bdf: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.bdf.to_string() == bdf)
    }

    /// The unreadable functions that could be one of `roles`.
    pub fn unread_of(&self, roles: &[Role]) -> Vec<&Unread> {
        self.unreadable
            .iter()
            .filter(|u| u.could_be_any(roles))
            .collect()
    }

    /// What was not read that cannot change a check looking for `roles`, as evidence: functions that cannot
    /// be one of them, and attributes (judged by the checks that use them).
    pub fn not_judged(&self, roles: &[Role]) -> Vec<String> {
        let functions = self
            .unreadable
            .iter()
            .filter(|u| !u.could_be_any(roles))
            .map(|u| {
                format!(
                    "{} (not read; cannot be one of the {} judged here)",
                    u.line,
                    looked_for(roles)
                )
            });
        let attributes = self
            .unread_attributes
            .iter()
            .map(|line| format!("{line} (not read)"));
        functions.chain(attributes).collect()
    }

    /// What a check looking for `roles` reports when it found nothing to judge: `nothing` (a skip) when every
    /// function that could be one of them was read, else an `error` naming those that were not.
    pub fn nothing_found(&self, id: &str, roles: &[Role], mut nothing: CheckResult) -> CheckResult {
        let unread = self.unread_of(roles);
        if unread.is_empty() {
            nothing.evidence.extend(self.not_judged(roles));
            return nothing;
        }
        let mut r = CheckResult::error(
            id,
            format!(
                "{} PCI function(s) could not be read, so {} may be missing{}",
                unread.len(),
                looked_for(roles),
                if nothing.summary.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", nothing.summary)
                }
            ),
        );
        for u in unread.iter().take(MAX_UNREADABLE_SHOWN) {
            r = r.note(u.line.clone());
        }
        if unread.len() > MAX_UNREADABLE_SHOWN {
            r = r.note(format!(
                "... and {} more",
                unread.len() - MAX_UNREADABLE_SHOWN
            ));
        }
        r.fix("check the sysfs files named above (class, vendor, device of each PCI function); run as root if access is denied")
            .code(&common::UNREAD)
    }

    /// `results` of a check built on this tree that looks for `roles`, with an `error` added when a function
    /// that could be one of them could not be read and no node-wide error is there yet: it may be the one that
    /// fails. A device's own error does not stand for the others.
    pub fn completed(
        &self,
        id: &str,
        roles: &[Role],
        mut results: Vec<CheckResult>,
    ) -> Vec<CheckResult> {
        let node_error = results
            .iter()
            .any(|r| r.subject.is_none() && r.status == Status::Error);
        if let Some(first) = results.first_mut() {
            for line in self.not_judged(roles) {
                if !first.evidence.contains(&line) {
                    first.evidence.push(line);
                }
            }
        }
        if !self.unread_of(roles).is_empty() && !node_error {
            results.push(self.nothing_found(id, roles, CheckResult::skip(id, "")));
        }
        results
    }

    pub fn with_role(&self, role: Role) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].role == role)
            .collect()
    }

    /// NICs with an RDMA device: the ones NCCL and GDR use.
    pub fn rdma_nics(&self) -> Vec<usize> {
        self.with_role(Role::Nic)
            .into_iter()
            .filter(|&i| !self.nodes[i].rdma_devices.is_empty())
            .collect()
    }

    /// `GPU0 0000:18:00.0`, `switch downstream port 0000:17:00.0`.
    pub fn subject(&self, i: usize) -> String {
        let n = &self.nodes[i];
        if n.label.is_empty() {
            format!("{} {}", n.role.as_str(), n.bdf)
        } else {
            format!("{} {}", n.label, n.bdf)
        }
    }

    /// `GPU0`, or the BDF for nodes without a label.
    pub fn short_name(&self, i: usize) -> String {
        let n = &self.nodes[i];
        if n.label.is_empty() {
            n.bdf.to_string()
        } else {
            n.label.clone()
        }
    }

    /// Parent chain, nearest first (excluding `i`).
    pub fn ancestors(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut cur = self.nodes[i].parent;
        while let Some(p) = cur {
            if out.contains(&p) || out.len() > self.nodes.len() {
                break; // malformed tree: never loop
            }
            out.push(p);
            cur = self.nodes[p].parent;
        }
        out
    }

    /// The functions a peer transfer between `a` and `b` crosses below the root complex: the ports on both
    /// sides up to and including their lowest common ancestor. None when the two meet only at a host bridge
    /// or beyond.
    pub fn bridges_between(&self, a: usize, b: usize) -> Option<Vec<usize>> {
        let up_a = self.ancestors(a);
        let up_b = self.ancestors(b);
        let pos_a = up_a.iter().position(|x| up_b.contains(x))?;
        let pos_b = up_b.iter().position(|x| *x == up_a[pos_a])?;
        let mut path = up_a[..=pos_a].to_vec();
        path.extend(&up_b[..pos_b]);
        Some(path)
    }

    /// [`PciTree::distance`] between two functions by bus id; None where the tree lacks either.
    pub fn distance_between(&self, a: &str, b: &str) -> Option<PcieDistance> {
        Some(self.distance(self.find(a)?, self.find(b)?))
    }

    /// `nvidia-smi topo -m` label for a pair.
    pub fn distance(&self, a: usize, b: usize) -> PcieDistance {
        let (na, nb) = (&self.nodes[a], &self.nodes[b]);
        if na.host_bridge != nb.host_bridge {
            return if na.attrs.numa_node == nb.attrs.numa_node {
                PcieDistance::NODE
            } else {
                PcieDistance::SYS
            };
        }
        match self.bridges_between(a, b) {
            None => PcieDistance::PHB,
            Some(bridges) => {
                // A switch is its upstream port and downstream ports: count switches, not ports.
                let mut switches: Vec<usize> = bridges
                    .iter()
                    .map(|&p| match self.nodes[p].role {
                        Role::SwitchDownstream => self.nodes[p].parent.unwrap_or(p),
                        _ => p,
                    })
                    .collect();
                switches.sort_unstable();
                switches.dedup();
                if switches.len() <= 1 {
                    PcieDistance::PIX
                } else {
                    PcieDistance::PXB
                }
            }
        }
    }

    /// The links from `i` up to its root port: the device's own link, then each switch's uplink.
    pub fn links_to_root(&self, i: usize) -> Vec<PathLink> {
        let mut links = Vec::new();
        let mut lower = Some(i);
        let mut hops = 0;
        while let Some(lo) = lower {
            hops += 1;
            if hops > self.nodes.len() {
                break;
            }
            let upper = self.nodes[lo].parent;
            if let Some(link) = self.link(lo, upper) {
                links.push(link);
            }
            // Skip the port: the next link starts at the switch upstream port above it.
            lower = upper.and_then(|u| self.nodes[u].parent);
        }
        links
    }

    fn link(&self, lower: usize, upper: Option<usize>) -> Option<PathLink> {
        let Link::Present(lo) = &self.nodes[lower].attrs.link else {
            return None;
        };
        let up = upper.and_then(|u| match &self.nodes[u].attrs.link {
            Link::Present(a) => Some(*a),
            _ => None,
        });
        let min_speed = |a: LinkSpeed, b: Option<LinkSpeed>| match (a, b) {
            (LinkSpeed::GtPerSec(x), Some(LinkSpeed::GtPerSec(y))) => LinkSpeed::GtPerSec(x.min(y)),
            (LinkSpeed::Unknown, Some(other)) => other,
            (a, _) => a,
        };
        let capable_width = match up.map(|u| u.max_width) {
            Some(w) if w > 0 => lo.max_width.min(w),
            _ => lo.max_width,
        };
        Some(PathLink {
            lower,
            upper,
            current_speed: lo.current_speed,
            current_width: lo.current_width,
            capable_speed: min_speed(lo.max_speed, up.map(|u| u.max_speed)),
            capable_width,
        })
    }

    /// The slowest link on the path (lowest GT/s × width), None when no link has attributes.
    pub fn narrowest_link(&self, i: usize) -> Option<PathLink> {
        self.links_to_root(i)
            .into_iter()
            .min_by(|a, b| a.capacity().total_cmp(&b.capacity()))
    }
}

/// An RDMA NIC: a function with an RDMA device on it (whatever its class: Omni-Path HFIs are fabric
/// controllers), a Mellanox network function (its RDMA driver may not be bound), a Mellanox function in
/// flash-recovery mode, or an Omni-Path HFI.
fn is_rdma_nic(a: &PciAttrs, has_rdma_device: bool) -> bool {
    (has_rdma_device && !a.is_bridge() && !a.is_gpu())
        || (a.vendor == pci::VENDOR_MELLANOX
            && (a.is_network() || pci_ids::flash_recovery(a.vendor, a.device).is_some()))
        || pci_ids::is_omnipath_hfi(a.vendor, a.device)
        || crate::sysfs::efa::is_efa(a.vendor, a.device)
}

/// What a function whose attributes could not all be read could be, from the class and vendor that could:
/// a function of known class that is not a display controller is no GPU, whatever else failed.
fn could_be(host: &Host, dir: &str, has_rdma_device: bool) -> Vec<Role> {
    let class = pci::read_hex(host, &format!("{dir}/class")).ok();
    let vendor = pci::read_hex(host, &format!("{dir}/vendor"))
        .ok()
        .and_then(|v| u16::try_from(v).ok());
    let device = pci::read_hex(host, &format!("{dir}/device"))
        .ok()
        .and_then(|v| u16::try_from(v).ok());
    let mut roles = Vec::new();
    let class_is = |f: fn(u32) -> bool| class.is_none_or(f);
    if class_is(|c| c >> 16 == 0x03) && vendor.is_none_or(|v| v == pci::VENDOR_NVIDIA) {
        roles.push(Role::Gpu);
    }
    let nic = has_rdma_device
        || match (vendor, device) {
            (Some(v), Some(d)) => {
                (v == pci::VENDOR_MELLANOX && class_is(|c| c >> 8 == 0x0200 || c >> 8 == 0x0207))
                    || pci_ids::flash_recovery(v, d).is_some()
                    || pci_ids::is_omnipath_hfi(v, d)
            }
            (Some(v), None) => v == pci::VENDOR_MELLANOX || v == pci_ids::VENDOR_INTEL,
            (None, _) => {
                class_is(|c| matches!(c >> 8, 0x0200 | 0x0207 | 0x0208)) || class.is_none()
            }
        };
    if nic {
        roles.push(Role::Nic);
    }
    if class_is(|c| c == 0x010802) {
        roles.push(Role::Nvme);
    }
    if class_is(|c| c >> 8 == 0x0604) {
        roles.extend_from_slice(BRIDGES);
    }
    if roles.is_empty() {
        roles.push(Role::Other);
    }
    roles
}

/// `GPUs, NICs or NVMe drives`, for what a check looks for.
fn looked_for(roles: &[Role]) -> &'static str {
    match (
        roles.contains(&Role::Gpu),
        roles.contains(&Role::Nic),
        roles.contains(&Role::Nvme),
    ) {
        (true, false, false) => "GPUs",
        (false, true, false) => "RDMA NICs",
        (true, true, false) => "GPUs, NICs or the ports between them",
        _ => "GPUs, NICs, NVMe drives or the ports between them",
    }
}

impl fmt::Display for PciNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.role.as_str(), self.bdf)
    }
}

/// Index of the nearest (PIX < PXB < PHB < NODE < SYS); the first of equals. Pairs a GPU with a port
/// (`gdr.loopback`, `pair`).
pub fn nearest(distances: &[PcieDistance]) -> Option<usize> {
    distances
        .iter()
        .enumerate()
        .min_by_key(|(i, d)| (**d, *i))
        .map(|(i, _)| i)
}

/// NUMA node for display: `-1` becomes `-`.
pub fn numa_label(node: &PciNode) -> String {
    node.attrs
        .numa_node
        .map(|n| n.to_string())
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn tree(scenario: &str) -> PciTree {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/hosts")
            .join(scenario);
        PciTree::read(&Host::at(&root).unwrap()).unwrap()
    }

    #[test]
    fn hgx_gpu_and_its_nic_share_a_switch_pix() {
        let t = tree("hgx-healthy");
        let gpus = t.with_role(Role::Gpu);
        let nics = t.rdma_nics();
        assert_eq!((gpus.len(), nics.len()), (8, 8));
        assert_eq!(t.distance(gpus[0], nics[0]), PcieDistance::PIX);
        assert_eq!(t.distance(gpus[0], nics[1]), PcieDistance::NODE);
        assert_eq!(t.distance(gpus[0], nics[7]), PcieDistance::SYS);
        assert_eq!(t.nodes[nics[0]].rdma_devices, ["mlx5_0"]);
        assert_eq!(t.subject(gpus[0]), "GPU0 0000:18:00.0");
    }

    #[test]
    fn hgx_nvswitches_are_not_gpus() {
        let t = tree("hgx-healthy");
        assert!(t
            .nodes
            .iter()
            .any(|n| n.attrs.device == 0x22a3 && n.role == Role::Other));
    }

    #[test]
    fn hgx_gpu_path_has_two_links_at_gen5_x16() {
        let t = tree("hgx-healthy");
        let gpu = t.with_role(Role::Gpu)[0];
        let links = t.links_to_root(gpu);
        assert_eq!(links.len(), 2);
        assert!(links.iter().all(|l| !l.is_degraded()));
        assert_eq!(links[0].current_width, 16);
    }

    #[test]
    fn h200_gpu_sits_on_the_host_bridge() {
        let t = tree("h200-vm-no-rdma");
        let gpus = t.with_role(Role::Gpu);
        assert_eq!(gpus.len(), 1);
        assert_eq!(t.nodes[gpus[0]].parent, None);
        let links = t.links_to_root(gpus[0]);
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].upper, None);
        assert!(!links[0].is_degraded());
        assert!(t.rdma_nics().is_empty());
    }

    /// Reproduced: an RDMA device whose `device` link could not be resolved was left off every function, as a
    /// software device is, and the tree passed as complete.
    #[test]
    fn an_unresolvable_rdma_device_link_leaves_the_tree_incomplete() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let link = std::fs::canonicalize(dir.path().join("sys/class/infiniband/mlx5_3"))
            .unwrap()
            .join("device");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("device", &link).unwrap();
        let t = PciTree::read(&Host::at(dir.path()).unwrap()).unwrap();
        assert_eq!(t.rdma_nics().len(), 7);
        assert_eq!(t.unreadable.len(), 1, "{:?}", t.unreadable);
        assert!(
            t.unreadable[0].line.contains("mlx5_3/device"),
            "{:?}",
            t.unreadable
        );
    }

    #[test]
    fn gen4_drive_in_gen5_slot_is_not_degraded() {
        let t = tree("hgx-healthy");
        let nvme = t.with_role(Role::Nvme)[0];
        let link = t.links_to_root(nvme)[0];
        assert_eq!(link.capable_speed, LinkSpeed::GtPerSec(16.0));
        assert!(!link.is_degraded());
    }
}
