//! `--profile auto`: picks the built-in profile whose `expect` fits what the host shows, read the same way the
//! probes read it (so it works under `--root`): GPU models from their PCI device ids, RDMA ports' link layer
//! and rate, and the counts of each.
//!
//! A profile's GPU model, NVLink (SXM modules), link layer, minimum rate and "no fabric" (`gdr: false`) say
//! what kind of node it is for: a host that does not show them is not that kind, and the profile is out. Its counts say how many the
//! node should have: a host with fewer (a GPU fell off the bus) is still that kind of node, so the counts only
//! rank the candidates and are reported, and the run then fails on them. Every built-in but `generic` is
//! for GPU nodes. No candidate: `generic`, with a note.
//!
//! The platform comes from DMI under the host root (`sys_vendor`, `product_name`, `board_vendor`; no metadata
//! service). An EC2 instance type DMI names that a built-in profile is for picks it outright: DMI alone says what
//! the node is, and the run then judges the hardware against it. A profile for a cloud (`expect.cloud`) is out on
//! a host whose DMI does not show that cloud; Azure and Google do not put the VM size in DMI, so there the GPU
//! and NIC shapes pick among the cloud's profiles. Absent or unknown DMI: the hardware match alone.

use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::profile::{self, LinkLayer, Profile, BUILTIN};
use crate::rules::nic_role;
use crate::rules::topology::{PciTree, Role};
use crate::sysfs::dmi::Dmi;
use crate::sysfs::efa;

/// How `--profile auto` picked the profile, for every report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Selection {
    /// What was asked for (`auto`).
    pub requested: String,
    /// What the host showed, and how each built-in profile compared.
    pub reasons: Vec<String>,
    /// Set when nothing matched and `generic` was used.
    pub note: Option<String>,
}

/// What `--profile` says to ask for this.
pub const AUTO: &str = "auto";
const FALLBACK: &str = "generic";

/// How a GPU sits on its board: what a profile's `nvlink: true` (every pair joined by NVLink) needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Board {
    /// An SXM module on an NVSwitch baseboard (HGX/DGX).
    Sxm,
    /// A Grace superchip (GH200, GB200, GB300): the GPU on NVLink-C2C, NVLink5 to the rack's switch trays.
    Superchip,
    /// A PCIe card.
    Card,
}

/// NVIDIA data-centre GPUs by PCI device id (the names of the PCI ID database; Blackwell ids from NVIDIA's
/// open-gpu-kernel-modules README), for the GPU model a profile expects. An id missing here matches no profile
/// that names a model.
const NVIDIA_GPUS: &[(u16, &str, Board)] = &[
    (0x20b0, "A100 SXM4 40GB", Board::Sxm),
    (0x20b1, "A100 PCIe 40GB", Board::Card),
    (0x20b2, "A100 SXM4 80GB", Board::Sxm),
    (0x20b3, "A100 SXM 64GB", Board::Sxm),
    (0x20b5, "A100 PCIe 80GB", Board::Card),
    (0x20b7, "A30", Board::Card),
    (0x20f1, "A100 PCIe 40GB", Board::Card),
    (0x20f3, "A800 SXM4 80GB", Board::Sxm),
    (0x2236, "A10", Board::Card),
    (0x2321, "H100 NVL", Board::Card),
    (0x2322, "H800 PCIe", Board::Card),
    (0x2324, "H800", Board::Sxm),
    (0x2330, "H100 SXM5 80GB", Board::Sxm),
    (0x2331, "H100 PCIe", Board::Card),
    (0x2335, "H200 SXM 141GB", Board::Sxm),
    (0x233b, "H200 NVL", Board::Card),
    (0x2342, "GH200", Board::Superchip),
    (0x26b5, "L40", Board::Card),
    (0x26b9, "L40S", Board::Card),
    (0x27b8, "L4", Board::Card),
    (0x2901, "B200", Board::Sxm),
    (0x2909, "B200", Board::Sxm),
    (0x2941, "GB200", Board::Superchip),
    (0x3182, "B300 SXM6 AC", Board::Sxm),
    (0x31c2, "GB300", Board::Superchip),
    (0x31c3, "GB300", Board::Superchip),
];

fn known_gpu(device: u16) -> Option<(&'static str, Board)> {
    NVIDIA_GPUS
        .iter()
        .find(|(id, ..)| *id == device)
        .map(|(_, name, board)| (*name, *board))
}

/// The PCI ID database's name of an NVIDIA GPU, if this table knows it.
fn gpu_model(device: u16) -> Option<&'static str> {
    known_gpu(device).map(|(name, _)| name)
}

/// A profile's `gpu_model` names a model when it is one word of the name: `B200` is not `GB200`, `H200` not
/// `GH200` (a substring would give a Grace tray an HGX board's profile).
fn names_model(name: &str, model: &str) -> bool {
    name.split_whitespace()
        .any(|word| word.eq_ignore_ascii_case(model.trim()))
}

struct Port {
    /// `mlx5_8/1`.
    name: String,
    link_layer: Option<LinkLayer>,
    gbps: Option<f64>,
    /// A compute rail or a storage/front-end port, as the run's checks will judge it ([`nic_role`]), and why.
    role: nic_role::Assigned,
}

impl Port {
    fn is_rail(&self) -> bool {
        self.role.role == nic_role::Role::Compute
    }
}

/// What the host shows.
struct Facts {
    /// PCI device id of each NVIDIA GPU function.
    gpus: Vec<u16>,
    rdma_devices: usize,
    /// RDMA devices with a compute rail among their ports.
    rail_devices: usize,
    /// Every port but those disabled by design (the unused planes of a multi-plane NIC).
    ports: Vec<Port>,
    /// PCI functions or attributes that could not be read (`path = reason`): a GPU among them is not counted.
    pci_unread: Vec<String>,
    /// EFA functions on the bus.
    efas: usize,
    /// DMI as read, or why it could not be.
    dmi: Result<Dmi, String>,
}

impl Facts {
    fn read(host: &Host, nccl_ib_hca: Option<&str>) -> Result<Facts, String> {
        let tree =
            PciTree::read(host).map_err(|e| format!("cannot read the PCI bus: {}", e.reason()))?;
        let gpus = tree
            .with_role(Role::Gpu)
            .into_iter()
            .map(|i| tree.nodes[i].attrs.device)
            .collect();
        // The ports' roles as the checks will give them: storage and front-end ports (a BlueField-3 beside the
        // InfiniBand rails) say nothing about the fabric NCCL runs on.
        let devices = nic_role::read(host, nccl_ib_hca, None)
            .map_err(|e| format!("cannot read the RDMA devices: {}", e.reason()))?
            .devices;
        let mut ports = Vec::new();
        let mut rail_devices = 0;
        for (device, attrs) in &devices {
            let before = ports.len();
            for (p, usage) in attrs {
                let role = match usage {
                    nic_role::Use::Role(role) => role,
                    nic_role::Use::DisabledByDesign => continue,
                    // A rail taken for storage (or the reverse) would pick another machine's profile.
                    nic_role::Use::Unplaced(unread) => {
                        return Err(format!(
                            "the role of {device}/{} could not be decided: {}",
                            p.port,
                            unread.join("; ")
                        ))
                    }
                };
                ports.push(Port {
                    name: format!("{device}/{}", p.port),
                    link_layer: if p.is_infiniband() {
                        Some(LinkLayer::Infiniband)
                    } else if p.is_ethernet() {
                        Some(LinkLayer::Ethernet)
                    } else {
                        None
                    },
                    gbps: p.parsed_rate().map(|r| r.gbps),
                    role: role.clone(),
                });
            }
            if ports[before..].iter().any(Port::is_rail) {
                rail_devices += 1;
            }
        }
        let efas = tree
            .nodes
            .iter()
            .filter(|n| efa::is_efa(n.attrs.vendor, n.attrs.device))
            .count();
        Ok(Facts {
            gpus,
            rdma_devices: devices.len(),
            rail_devices,
            ports,
            // Only what could change the pick: a GPU or an RDMA NIC among them.
            pci_unread: tree
                .unread_of(&[Role::Gpu, Role::Nic])
                .into_iter()
                .map(|u| u.line.clone())
                .collect(),
            efas,
            dmi: Dmi::read(host).map_err(|e| e.to_string()),
        })
    }

    /// `8× H100 SXM5 80GB (10de:2330); 8 RDMA devices, 8 ports: 8 InfiniBand (fastest 400 Gb/s)`.
    fn describe(&self) -> String {
        let mut models: Vec<(u16, usize)> = Vec::new();
        for &d in &self.gpus {
            match models.iter_mut().find(|(id, _)| *id == d) {
                Some((_, n)) => *n += 1,
                None => models.push((d, 1)),
            }
        }
        let gpus = if models.is_empty() {
            "no NVIDIA GPU on the PCI bus".to_string()
        } else {
            models
                .iter()
                .map(|(d, n)| {
                    format!(
                        "{n}× {} (10de:{d:04x})",
                        gpu_model(*d).unwrap_or("unknown model")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let rdma = if self.rdma_devices == 0 {
            "no RDMA device".to_string()
        } else {
            let storage = self.ports.iter().filter(|p| !p.is_rail()).count();
            let mut text = format!(
                "{} RDMA devices, {} ports: {} compute rail(s) ({})",
                self.rdma_devices,
                self.ports.len(),
                self.ports.len() - storage,
                self.describe_ports(true)
            );
            if storage > 0 {
                text.push_str(&format!(
                    ", {storage} storage/front-end ({}), not judged for the pick",
                    self.describe_ports(false)
                ));
            }
            text
        };
        let unread = match self.pci_unread.first() {
            None => String::new(),
            Some(first) => format!(
                "; {} PCI entries unread, first {first}: the pick is made without them",
                self.pci_unread.len()
            ),
        };
        let efa = if self.efas > 0 {
            format!("; {} EFA on the PCI bus", self.efas)
        } else {
            String::new()
        };
        format!(
            "host shows {gpus}; {rdma}{efa}{unread}; DMI {}",
            self.describe_dmi()
        )
    }

    /// `8 InfiniBand, fastest 400 Gb/s` for the rails (`rails`) or the other ports.
    fn describe_ports(&self, rails: bool) -> String {
        let of_role = || self.ports.iter().filter(move |p| p.is_rail() == rails);
        let layers: Vec<String> = [LinkLayer::Infiniband, LinkLayer::Ethernet]
            .into_iter()
            .filter_map(|l| {
                let n = of_role().filter(|p| p.link_layer == Some(l)).count();
                (n > 0).then(|| {
                    let fastest = of_role()
                        .filter(|p| p.link_layer == Some(l))
                        .filter_map(|p| p.gbps)
                        .reduce(f64::max)
                        .map_or("rate unreadable".into(), |g| format!("fastest {g} Gb/s"));
                    format!("{n} {}, {fastest}", layer_name(l))
                })
            })
            .collect();
        if layers.is_empty() {
            "link layer unreadable".into()
        } else {
            layers.join("; ")
        }
    }

    /// Why each storage/front-end port is not a rail, for the reasons.
    fn storage_ports(&self) -> Option<String> {
        let lines: Vec<String> = self
            .ports
            .iter()
            .filter(|p| !p.is_rail())
            .map(|p| format!("{} {}", p.name, p.role.evidence()))
            .collect();
        (!lines.is_empty()).then(|| {
            format!(
                "ports left out of the pick as storage/front end: {}",
                lines.join(", ")
            )
        })
    }

    fn describe_dmi(&self) -> String {
        match &self.dmi {
            Ok(d) => d.describe(),
            Err(e) => format!("unreadable ({e})"),
        }
    }

    fn cloud(&self) -> Option<crate::sysfs::dmi::Cloud> {
        self.dmi.as_ref().ok().and_then(Dmi::cloud)
    }

    fn rails(&self) -> impl Iterator<Item = &Port> {
        self.ports.iter().filter(|p| p.is_rail())
    }

    fn rails_of(&self, layer: LinkLayer) -> impl Iterator<Item = &Port> {
        self.rails().filter(move |p| p.link_layer == Some(layer))
    }

    /// The fabric NCCL runs on: the link layer of most compute rails (where ports tie for nearest, a front-end
    /// port can still be among them). None without rails, or where as many are of each.
    fn rail_layer(&self) -> Option<LinkLayer> {
        let ib = self.rails_of(LinkLayer::Infiniband).count();
        let eth = self.rails_of(LinkLayer::Ethernet).count();
        match ib.cmp(&eth) {
            std::cmp::Ordering::Greater => Some(LinkLayer::Infiniband),
            std::cmp::Ordering::Less => Some(LinkLayer::Ethernet),
            std::cmp::Ordering::Equal => None,
        }
    }

    /// The fastest rail of a link layer (of any, without one): one port trained down does not change what the
    /// node is.
    fn fastest(&self, layer: Option<LinkLayer>) -> Option<f64> {
        self.rails()
            .filter(|p| layer.is_none_or(|l| p.link_layer == Some(l)))
            .filter_map(|p| p.gbps)
            .reduce(f64::max)
    }
}

fn layer_name(layer: LinkLayer) -> &'static str {
    match layer {
        LinkLayer::Infiniband => "InfiniBand",
        LinkLayer::Ethernet => "Ethernet",
    }
}

/// How one built-in profile compares with the host.
struct Fit {
    name: &'static str,
    /// Kind-of-node expectations met; None when one is not met (the profile is out).
    kind_met: Option<usize>,
    counts_met: usize,
    /// `gpu_model H100: yes`, … in the order checked.
    findings: Vec<String>,
}

fn fit(name: &'static str, p: &Profile, host: &Facts) -> Fit {
    let e = &p.expect;
    let mut kind: Vec<(bool, String)> = vec![(
        !host.gpus.is_empty(),
        "a GPU node profile: NVIDIA GPUs on the bus".into(),
    )];
    if let Some(cloud) = e.cloud {
        kind.push((
            host.cloud() == Some(cloud),
            format!("cloud {} in DMI", cloud.name()),
        ));
    }
    if let Some(model) = &e.gpu_model {
        let all = host
            .gpus
            .iter()
            .all(|d| gpu_model(*d).is_some_and(|m| names_model(m, model)));
        kind.push((all && !host.gpus.is_empty(), format!("gpu_model {model}")));
    }
    if e.nvlink == Some(true) {
        // Every pair on NVLink (NVSwitch) is a board of SXM modules or of Grace superchips: a PCIe card of the
        // same model is another kind of node.
        let nvlink = host.gpus.iter().all(|d| {
            known_gpu(*d).is_some_and(|(_, board)| matches!(board, Board::Sxm | Board::Superchip))
        });
        kind.push((
            nvlink && !host.gpus.is_empty(),
            "nvlink: SXM modules or superchips".into(),
        ));
    }
    if let Some(layer) = e.rdma_link_layer {
        kind.push((
            host.rail_layer() == Some(layer),
            format!("rdma_link_layer {} of the compute rails", layer_name(layer)),
        ));
    }
    if let Some(min) = e.rdma_min_rate_gbps {
        let fastest = host.fastest(e.rdma_link_layer);
        kind.push((
            fastest.is_some_and(|g| g >= min),
            format!("rdma_min_rate_gbps {min}"),
        ));
    }
    if e.gdr == Some(false) {
        kind.push((host.rdma_devices == 0, "gdr false: no RDMA device".into()));
    }
    let counts: Vec<(bool, String)> = [
        (e.gpu_count, host.gpus.len(), "gpu_count"),
        (e.rdma_device_count, host.rail_devices, "rdma_device_count"),
        (e.rdma_port_count, host.rails().count(), "rdma_port_count"),
        (e.efa_device_count, host.efas, "efa_device_count"),
    ]
    .into_iter()
    .filter_map(|(want, have, key)| {
        want.map(|w| {
            let ok = w as usize == have;
            (
                ok,
                if ok {
                    format!("{key} {w}")
                } else {
                    format!("{key} {w} (host shows {have}: the run will say so)")
                },
            )
        })
    })
    .collect();
    let word = |ok: bool| if ok { "yes" } else { "no" };
    let findings = kind
        .iter()
        .chain(&counts)
        .map(|(ok, what)| format!("{what}: {}", word(*ok)))
        .collect();
    Fit {
        name,
        kind_met: kind.iter().all(|(ok, _)| *ok).then_some(kind.len()),
        counts_met: counts.iter().filter(|(ok, _)| *ok).count(),
        findings,
    }
}

/// The built-in profile for this host and why. Errors are the built-ins' own (a broken build).
/// `nccl_ib_hca` is the variable's value where set: it decides the compute rails as it does for the checks.
pub fn choose(
    host: &Host,
    known_checks: &[&str],
    nccl_ib_hca: Option<&str>,
) -> Result<(String, Selection), profile::ProfileError> {
    if let Some(picked) = by_instance_type(host, known_checks)? {
        return Ok(picked);
    }
    match Facts::read(host, nccl_ib_hca) {
        Ok(facts) => select(&facts, known_checks),
        Err(why) => Ok((
            FALLBACK.into(),
            Selection {
                requested: AUTO.into(),
                reasons: vec![why.clone()],
                note: Some(format!("{why}: fell back to `{FALLBACK}`")),
            },
        )),
    }
}

/// The built-in profile for the EC2 instance type DMI names, if one is.
fn by_instance_type(
    host: &Host,
    known_checks: &[&str],
) -> Result<Option<(String, Selection)>, profile::ProfileError> {
    let Ok(dmi) = Dmi::read(host) else {
        return Ok(None);
    };
    let Some(instance) = dmi.instance_type() else {
        return Ok(None);
    };
    for (name, _) in BUILTIN {
        let p = profile::load(name, known_checks)?;
        if p.expect.instance_type.as_deref() == Some(instance) {
            return Ok(Some((
                name.to_string(),
                Selection {
                    requested: AUTO.into(),
                    reasons: vec![
                        format!("DMI {}", dmi.describe()),
                        format!(
                            "picked {name}: the EC2 instance type DMI names (the run judges the hardware against it)"
                        ),
                    ],
                    note: None,
                },
            )));
        }
    }
    Ok(None)
}

fn select(
    facts: &Facts,
    known_checks: &[&str],
) -> Result<(String, Selection), profile::ProfileError> {
    let mut fits = Vec::new();
    for (name, _) in BUILTIN.iter().filter(|(n, _)| *n != FALLBACK) {
        fits.push(fit(name, &profile::load(name, known_checks)?, facts));
    }
    // Most kind-of-node expectations met first (the most specific profile), then most counts; ties keep the
    // order of BUILTIN.
    let best = fits
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            f.kind_met
                .map(|k| (k, f.counts_met, std::cmp::Reverse(i), f))
        })
        .max_by_key(|(k, c, i, _)| (*k, *c, *i))
        .map(|(.., f)| f);
    let mut reasons = vec![facts.describe()];
    let mut note = None;
    let storage = facts.storage_ports();
    let picked = match best {
        Some(f) => {
            reasons.push(format!("picked {}: {}", f.name, f.findings.join(", ")));
            f.name
        }
        None => {
            note = Some(format!(
                "no built-in profile fits this host: fell back to `{FALLBACK}`; name one with --profile"
            ));
            FALLBACK
        }
    };
    reasons.extend(storage);
    for f in fits.iter().filter(|f| f.name != picked) {
        let verdict = if f.kind_met.is_some() {
            "fits, less closely"
        } else {
            "does not fit"
        };
        reasons.push(format!("{} {verdict}: {}", f.name, f.findings.join(", ")));
    }
    Ok((
        picked.into(),
        Selection {
            requested: AUTO.into(),
            reasons,
            note,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn choose_for(tree: &str) -> (String, Selection) {
        let host = Host::at(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/hosts")
                .join(tree),
        )
        .unwrap();
        choose(&host, &crate::probes::ids(), None).unwrap()
    }

    #[test]
    fn recorded_trees_get_the_profile_of_their_node_type() {
        for (tree, want) in [
            ("hgx-healthy", "hgx-h100-ib"),
            ("ib-port-down", "hgx-h100-ib"),
            ("roce-mtu-1500", "roce-400g"),
            ("h200-vm-no-rdma", "gpu-only"),
            ("h100-ib-bond0-storage", "hgx-h100-ib"),
            ("dgx-ib-storage-eth", "hgx-h100-ib"),
            ("hgx-b200-ib", "hgx-b200-ib"),
            ("hgx-b200-ib-rail-down", "hgx-b200-ib"),
            ("hgx-b300-cx8", "hgx-b300-ib"),
            ("hgx-b300-cx8-gpu-x8", "hgx-b300-ib"),
            ("gb200-tray-ib", "gb200-nvl72-ib"),
            ("gb200-tray-ib-rail-down", "gb200-nvl72-ib"),
            ("gb200-tray-roce", "gb200-nvl72-roce"),
            ("gh200-ib", "gh200"),
        ] {
            let (got, why) = choose_for(tree);
            assert_eq!(got, want, "{tree}: {why:#?}");
            assert!(why.note.is_none(), "{tree}: {why:#?}");
            assert!(
                why.reasons[1].starts_with(&format!("picked {want}: ")),
                "{why:#?}"
            );
        }
    }

    #[test]
    fn reasons_name_what_the_host_shows() {
        let (_, why) = choose_for("hgx-healthy");
        assert_eq!(
            why.reasons[0],
            "host shows 8× H100 SXM5 80GB (10de:2330); 8 RDMA devices, 8 ports: 8 compute rail(s) (8 InfiniBand, \
             fastest 400 Gb/s); DMI sys_vendor absent, product_name absent, board_vendor absent"
        );
        assert!(why.reasons[1].contains("gpu_model H100: yes"), "{why:#?}");
        assert!(why.reasons.iter().any(
            |r| r.starts_with("hgx-h200-ib does not fit: ") && r.contains("gpu_model H200: no")
        ));
    }

    fn port(i: usize, layer: LinkLayer, gbps: f64, role: nic_role::Role) -> Port {
        Port {
            name: format!("mlx5_{i}/1"),
            link_layer: Some(layer),
            gbps: Some(gbps),
            role: nic_role::Assigned {
                role,
                why: "as the test places it".into(),
                data_path: true,
            },
        }
    }

    fn hgx_like(gpu: u16, gpus: usize) -> Facts {
        Facts {
            gpus: vec![gpu; gpus],
            rdma_devices: 8,
            rail_devices: 8,
            ports: (0..8)
                .map(|i| port(i, LinkLayer::Infiniband, 400.0, nic_role::Role::Compute))
                .collect(),
            pci_unread: Vec::new(),
            efas: 0,
            dmi: Ok(Dmi::default()),
        }
    }

    /// Bare-metal Blackwell nodes carry BlueField-3 Ethernet ports beside their rails (400 GbE, as fast as the
    /// rails): they are storage/front end, and the pick is the rails' (before: `roce-400g`, every rail failed).
    #[test]
    fn storage_ports_beside_the_rails_do_not_pick_the_profile() {
        for (tree, want, storage) in [
            ("hgx-b200-ib", "hgx-b200-ib", "mlx5_8/1"),
            ("hgx-b300-cx8", "hgx-b300-ib", "mlx5_11/1"),
            ("h100-ib-bond0-storage", "hgx-h100-ib", "mlx5_bond_0/1"),
        ] {
            let (got, why) = choose_for(tree);
            assert_eq!(got, want, "{why:#?}");
            assert!(
                why.reasons[0].contains("storage/front-end (")
                    && why.reasons[0].contains(" Ethernet, "),
                "{why:#?}"
            );
            assert!(
                why.reasons.iter().any(|r| r
                    .starts_with("ports left out of the pick as storage/front end: ")
                    && r.contains(&format!("{storage} role = storage ("))),
                "{why:#?}"
            );
            assert!(
                why.reasons
                    .iter()
                    .any(|r| r.starts_with("roce-400g does not fit: ")
                        && r.contains("rdma_link_layer Ethernet of the compute rails: no")),
                "{why:#?}"
            );
        }
    }

    /// A Grace tray's GPUs are equally near every NIC of their Grace, the front-end bond among them: the rails'
    /// link layer is the one most of them have.
    #[test]
    fn grace_trays_pick_by_the_rails_link_layer() {
        let (got, why) = choose_for("gb200-tray-ib");
        assert_eq!(got, "gb200-nvl72-ib", "{why:#?}");
        assert!(
            why.reasons[1].contains("rdma_link_layer InfiniBand of the compute rails: yes"),
            "{why:#?}"
        );
        let mut tray = hgx_like(0x2941, 4);
        tray.ports.truncate(4);
        tray.rail_devices = 4;
        tray.rdma_devices = 6;
        for i in 4..6 {
            tray.ports
                .push(port(i, LinkLayer::Ethernet, 400.0, nic_role::Role::Compute));
        }
        let (got, _) = select(&tray, &crate::probes::ids()).unwrap();
        assert_eq!(got, "gb200-nvl72-ib");
        for p in &mut tray.ports[..4] {
            p.link_layer = Some(LinkLayer::Ethernet);
        }
        let (got, why) = select(&tray, &crate::probes::ids()).unwrap();
        assert_eq!(got, "gb200-nvl72-roce", "{why:#?}");
        // As many of each: the fabric cannot be told, so no profile that names one fits.
        tray.ports.truncate(2);
        tray.ports
            .extend((2..4).map(|i| port(i, LinkLayer::Infiniband, 400.0, nic_role::Role::Compute)));
        let (got, why) = select(&tray, &crate::probes::ids()).unwrap();
        assert_eq!(got, "generic", "{why:#?}");
    }

    /// `gpu_model` is a word of the GPU's name: a GB200 tray is not an HGX B200 board, a GH200 not an H200.
    #[test]
    fn a_model_is_a_word_of_the_name_not_a_substring() {
        let (got, why) = select(&hgx_like(0x2941, 4), &crate::probes::ids()).unwrap();
        assert_eq!(got, "gb200-nvl72-ib", "{why:#?}");
        assert!(why.reasons.iter().any(
            |r| r.starts_with("hgx-b200-ib does not fit: ") && r.contains("gpu_model B200: no")
        ));
        let (got, why) = select(&hgx_like(0x2342, 1), &crate::probes::ids()).unwrap();
        assert_eq!(got, "gh200", "{why:#?}");
        assert!(why.reasons.iter().any(
            |r| r.starts_with("hgx-h200-ib does not fit: ") && r.contains("gpu_model H200: no")
        ));
        assert!(names_model("B300 SXM6 AC", "b300"));
        assert!(!names_model("GB300", "B300"));
    }

    /// No built-in fits: a profile of the node's shape (its fabric) or `generic`, never another machine's.
    #[test]
    fn a_node_no_profile_fits_gets_a_shaped_or_generic_profile() {
        let (got, why) = choose_for("blackwell-no-profile");
        assert_eq!(got, "roce-400g", "{why:#?}");
        assert!(
            why.reasons[0].contains("8× unknown model (10de:2bb5)"),
            "{why:#?}"
        );
        // The same cards on XDR InfiniBand: no fabric-shaped profile is for 800G IB without a model.
        let mut facts = hgx_like(0x2bb5, 8);
        for p in &mut facts.ports {
            p.gbps = Some(800.0);
        }
        let (got, why) = select(&facts, &crate::probes::ids()).unwrap();
        assert_eq!(got, "generic", "{why:#?}");
        assert!(why
            .note
            .unwrap()
            .contains("no built-in profile fits this host"));
        // B300 modules with the rails of an H100 board: the B300 profile still, with its rate judged by the run.
        let mut facts = hgx_like(0x3182, 8);
        facts.ports.iter_mut().for_each(|p| p.gbps = Some(800.0));
        assert_eq!(
            select(&facts, &crate::probes::ids()).unwrap().0,
            "hgx-b300-ib"
        );
    }

    #[test]
    fn cloud_blackwell_nodes_get_their_cloud_profile() {
        let cloud = |vendor: &str, product: &str| Dmi {
            sys_vendor: Some(vendor.into()),
            product_name: Some(product.into()),
            board_vendor: Some(vendor.into()),
        };
        let mut azure = hgx_like(0x2941, 4);
        azure.ports.truncate(4);
        azure.dmi = Ok(cloud("Microsoft Corporation", "Virtual Machine"));
        let ids = crate::probes::ids();
        assert_eq!(
            select(&azure, &ids).unwrap().0,
            "Standard_ND128isr_NDR_GB200_v6"
        );
        let mut a4x = azure;
        a4x.dmi = Ok(cloud("Google", "Google Compute Engine"));
        a4x.ports
            .iter_mut()
            .for_each(|p| p.link_layer = Some(LinkLayer::Ethernet));
        assert_eq!(select(&a4x, &ids).unwrap().0, "a4x-highgpu-4g");
        let mut a4 = hgx_like(0x2901, 8);
        a4.dmi = a4x.dmi;
        a4.ports
            .iter_mut()
            .for_each(|p| p.link_layer = Some(LinkLayer::Ethernet));
        assert_eq!(select(&a4, &ids).unwrap().0, "a4-highgpu-8g");
        for instance in ["p6-b200.48xlarge", "p6e-gb200.36xlarge"] {
            let dir = tempfile::tempdir().unwrap();
            for (file, value) in [
                ("sys_vendor", "Amazon EC2"),
                ("product_name", instance),
                ("board_vendor", "Amazon EC2"),
            ] {
                let path = dir.path().join("sys/class/dmi/id").join(file);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, format!("{value}\n")).unwrap();
            }
            let host = Host::at(dir.path()).unwrap();
            assert_eq!(choose(&host, &ids, None).unwrap().0, instance);
        }
    }

    #[test]
    fn a_missing_gpu_keeps_the_node_type_and_is_reported() {
        let (got, why) = select(&hgx_like(0x2330, 7), &crate::probes::ids()).unwrap();
        assert_eq!(got, "hgx-h100-ib");
        assert!(
            why.reasons[1].contains("gpu_count 8 (host shows 7: the run will say so): no"),
            "{why:#?}"
        );
    }

    #[test]
    fn pcie_cards_are_not_an_sxm_board() {
        let (got, why) = select(&hgx_like(0x2331, 8), &crate::probes::ids()).unwrap();
        assert_eq!(got, "generic", "{why:#?}");
        assert!(why.note.is_some());
        assert!(why
            .reasons
            .iter()
            .any(|r| r.starts_with("hgx-h100-ib does not fit")
                && r.contains("nvlink: SXM modules or superchips: no")));
    }

    #[test]
    fn unknown_gpu_and_slow_ports_fit_no_model_profile() {
        let mut facts = hgx_like(0x1234, 8);
        for p in &mut facts.ports {
            p.gbps = Some(100.0);
        }
        let (got, why) = select(&facts, &crate::probes::ids()).unwrap();
        assert_eq!(got, "generic");
        assert!(
            why.reasons[0].contains("8× unknown model (10de:1234)"),
            "{why:#?}"
        );
    }

    #[test]
    fn a_partly_unread_bus_is_named_in_the_reasons() {
        let dir = tempfile::tempdir().unwrap();
        // A GPU function whose `class` cannot be read: it is left out of the tree, not silently absent.
        let gpu = dir.path().join("sys/devices/pci0000:00/0000:00:01.0");
        std::fs::create_dir_all(&gpu).unwrap();
        std::fs::write(gpu.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(gpu.join("device"), "0x2330\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sys/bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            dir.path().join("sys/bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        let host = Host::at(dir.path()).unwrap();
        let (_, why) = choose(&host, &crate::probes::ids(), None).unwrap();
        assert!(
            why.reasons[0].contains("1 PCI entries unread, first ")
                && why.reasons[0].contains("0000:00:01.0/class"),
            "{:?}",
            why.reasons
        );
    }

    #[test]
    fn no_gpu_falls_back_to_generic_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/bus/pci/devices")).unwrap();
        let host = Host::at(dir.path()).unwrap();
        let (got, why) = choose(&host, &crate::probes::ids(), None).unwrap();
        assert_eq!(got, "generic");
        assert!(why.note.unwrap().contains("fell back to `generic`"));
        assert!(
            why.reasons[0].contains("no NVIDIA GPU on the PCI bus"),
            "{:?}",
            why.reasons
        );
    }
}
