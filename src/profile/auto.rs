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

use crate::host::Host;
use crate::profile::{self, LinkLayer, Profile, BUILTIN};
use crate::report::Selection;
use crate::sysfs::dmi::Dmi;
use crate::sysfs::{efa, infiniband};
use crate::topology::{PciTree, Role};

/// What `--profile` says to ask for this.
pub const AUTO: &str = "auto";
const FALLBACK: &str = "generic";

/// NVIDIA data-centre GPUs by PCI device id (the names of the PCI ID database), for the GPU model a profile
/// expects. An id missing here matches no profile that names a model.
const NVIDIA_GPUS: &[(u16, &str)] = &[
    (0x20b0, "A100 SXM4 40GB"),
    (0x20b1, "A100 PCIe 40GB"),
    (0x20b2, "A100 SXM4 80GB"),
    (0x20b3, "A100 SXM 64GB"),
    (0x20b5, "A100 PCIe 80GB"),
    (0x20b7, "A30"),
    (0x20f1, "A100 PCIe 40GB"),
    (0x20f3, "A800 SXM4 80GB"),
    (0x2236, "A10"),
    (0x2321, "H100 NVL"),
    (0x2322, "H800 PCIe"),
    (0x2324, "H800"),
    (0x2330, "H100 SXM5 80GB"),
    (0x2331, "H100 PCIe"),
    (0x2335, "H200 SXM 141GB"),
    (0x233b, "H200 NVL"),
    (0x2342, "GH200"),
    (0x26b5, "L40"),
    (0x26b9, "L40S"),
    (0x27b8, "L4"),
    (0x2901, "B200"),
];

/// The PCI ID database's name of an NVIDIA GPU, if this table knows it.
fn gpu_model(device: u16) -> Option<&'static str> {
    NVIDIA_GPUS
        .iter()
        .find(|(id, _)| *id == device)
        .map(|(_, name)| *name)
}

struct Port {
    link_layer: Option<LinkLayer>,
    gbps: Option<f64>,
}

/// What the host shows.
struct Facts {
    /// PCI device id of each NVIDIA GPU function.
    gpus: Vec<u16>,
    rdma_devices: usize,
    ports: Vec<Port>,
    /// PCI functions or attributes that could not be read (`path = reason`): a GPU among them is not counted.
    pci_unread: Vec<String>,
    /// EFA functions on the bus.
    efas: usize,
    /// DMI as read, or why it could not be.
    dmi: Result<Dmi, String>,
}

impl Facts {
    fn read(host: &Host) -> Result<Facts, String> {
        let tree =
            PciTree::read(host).map_err(|e| format!("cannot read the PCI bus: {}", e.reason()))?;
        let gpus = tree
            .with_role(Role::Gpu)
            .into_iter()
            .map(|i| tree.nodes[i].attrs.device)
            .collect();
        let devices = infiniband::read_all_ports(host)
            .map_err(|e| format!("cannot read the RDMA devices: {}", e.reason()))?;
        let ports = devices
            .iter()
            .flat_map(|(_, ports)| ports)
            .map(|p| Port {
                link_layer: if p.is_infiniband() {
                    Some(LinkLayer::Infiniband)
                } else if p.is_ethernet() {
                    Some(LinkLayer::Ethernet)
                } else {
                    None
                },
                gbps: p.parsed_rate().map(|r| r.gbps),
            })
            .collect();
        let efas = tree
            .nodes
            .iter()
            .filter(|n| efa::is_efa(n.attrs.vendor, n.attrs.device))
            .count();
        Ok(Facts {
            gpus,
            rdma_devices: devices.len(),
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
            let layers: Vec<String> = [LinkLayer::Infiniband, LinkLayer::Ethernet]
                .into_iter()
                .filter_map(|l| {
                    let n = self.ports_of(l).count();
                    (n > 0).then(|| {
                        let fastest = self
                            .fastest(l)
                            .map_or("rate unreadable".into(), |g| format!("fastest {g} Gb/s"));
                        format!("{n} {} ({fastest})", layer_name(l))
                    })
                })
                .collect();
            format!(
                "{} RDMA devices, {} ports: {}",
                self.rdma_devices,
                self.ports.len(),
                if layers.is_empty() {
                    "link layer unreadable".into()
                } else {
                    layers.join(", ")
                }
            )
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

    fn describe_dmi(&self) -> String {
        match &self.dmi {
            Ok(d) => d.describe(),
            Err(e) => format!("unreadable ({e})"),
        }
    }

    fn cloud(&self) -> Option<crate::sysfs::dmi::Cloud> {
        self.dmi.as_ref().ok().and_then(Dmi::cloud)
    }

    fn ports_of(&self, layer: LinkLayer) -> impl Iterator<Item = &Port> {
        self.ports
            .iter()
            .filter(move |p| p.link_layer == Some(layer))
    }

    /// The fastest port of a link layer: one port trained down does not change what the node is.
    fn fastest(&self, layer: LinkLayer) -> Option<f64> {
        self.ports_of(layer).filter_map(|p| p.gbps).reduce(f64::max)
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
        let all = host.gpus.iter().all(|d| {
            gpu_model(*d).is_some_and(|m| m.to_lowercase().contains(&model.to_lowercase()))
        });
        kind.push((all && !host.gpus.is_empty(), format!("gpu_model {model}")));
    }
    if e.nvlink == Some(true) {
        // Every pair on NVLink (NVSwitch) is a board of SXM modules: a PCIe card of the same model is another
        // kind of node.
        let sxm = host
            .gpus
            .iter()
            .all(|d| gpu_model(*d).is_some_and(|m| m.contains("SXM")));
        kind.push((sxm && !host.gpus.is_empty(), "nvlink: SXM modules".into()));
    }
    if let Some(layer) = e.rdma_link_layer {
        kind.push((
            host.ports_of(layer).next().is_some(),
            format!("rdma_link_layer {}", layer_name(layer)),
        ));
    }
    if let Some(min) = e.rdma_min_rate_gbps {
        let fastest = match e.rdma_link_layer {
            Some(l) => host.fastest(l),
            None => host.ports.iter().filter_map(|p| p.gbps).reduce(f64::max),
        };
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
        (e.rdma_device_count, host.rdma_devices, "rdma_device_count"),
        (e.rdma_port_count, host.ports.len(), "rdma_port_count"),
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
pub fn choose(
    host: &Host,
    known_checks: &[&str],
) -> Result<(String, Selection), profile::ProfileError> {
    if let Some(picked) = by_instance_type(host, known_checks)? {
        return Ok(picked);
    }
    match Facts::read(host) {
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
        choose(&host, &crate::probes::ids()).unwrap()
    }

    #[test]
    fn recorded_trees_get_the_profile_of_their_node_type() {
        for (tree, want) in [
            ("hgx-healthy", "hgx-h100-ib"),
            ("ib-port-down", "hgx-h100-ib"),
            ("roce-mtu-1500", "roce-400g"),
            ("h200-vm-no-rdma", "gpu-only"),
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
            "host shows 8× H100 SXM5 80GB (10de:2330); 8 RDMA devices, 8 ports: 8 InfiniBand (fastest 400 Gb/s); \
             DMI sys_vendor absent, product_name absent, board_vendor absent"
        );
        assert!(why.reasons[1].contains("gpu_model H100: yes"), "{why:#?}");
        assert!(why.reasons.iter().any(
            |r| r.starts_with("hgx-h200-ib does not fit: ") && r.contains("gpu_model H200: no")
        ));
    }

    fn hgx_like(gpu: u16, gpus: usize) -> Facts {
        Facts {
            gpus: vec![gpu; gpus],
            rdma_devices: 8,
            ports: (0..8)
                .map(|_| Port {
                    link_layer: Some(LinkLayer::Infiniband),
                    gbps: Some(400.0),
                })
                .collect(),
            pci_unread: Vec::new(),
            efas: 0,
            dmi: Ok(Dmi::default()),
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
                && r.contains("nvlink: SXM modules: no")));
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
        let (_, why) = choose(&host, &crate::probes::ids()).unwrap();
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
        let (got, why) = choose(&host, &crate::probes::ids()).unwrap();
        assert_eq!(got, "generic");
        assert!(why.note.unwrap().contains("fell back to `generic`"));
        assert!(
            why.reasons[0].contains("no NVIDIA GPU on the PCI bus"),
            "{:?}",
            why.reasons
        );
    }
}
