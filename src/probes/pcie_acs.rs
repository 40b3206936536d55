//! `pcie.acs`: no ACS Request/Completion Redirect on a switch port between a GPU and a NIC, NVMe drive or
//! another GPU (config space: extended capability 0x000D).

use std::collections::BTreeMap;

use crate::host::{Host, ReadError};
use crate::probe::{
    common, CheckResult, Context, Environment, Explain, FindingCode, Need, Probe, ProbeMeta, Remedy,
};
use crate::rules::topology::{PciTree, Role, DATA_PATHS};
use crate::sysfs::hypervisor::{self, Hypervisor};
use crate::sysfs::pci_config::{read_config, ConfigReadError, ConfigSpace};

pub struct PcieAcs;

const ID: &str = "pcie.acs";

const ACS_REDIRECT: FindingCode = FindingCode {
    code: "PCI201",
    title: "ACS redirect is enabled on a PCIe switch port between GPUs and their peers",
    explanation: "Access Control Services redirect on a switch's downstream port forces GPU↔NIC and GPU↔GPU peer traffic up to the root complex: GPUDirect P2P and RDMA lose their bandwidth or fail. Disable ACS in the BIOS or with `pci=disable_acs_redir=` on the kernel command line (a reboot), or with setpci until the next boot.",
    step: Some(Remedy::Reboot),
};
const IN_VM: FindingCode = FindingCode {
    code: "PCI202",
    title: "not applicable in a VM: guest PCIe ports are virtual",
    explanation: "A skip: in a virtual machine the PCIe ports are the hypervisor's, and ACS is the host's isolation; GPU P2P and GDR bandwidth measure the effect instead.",
    step: None,
};
const NEEDS_ROOT: FindingCode = FindingCode {
    code: "PCI203",
    title: "needs root: ACS lives beyond the 64-byte config header",
    explanation: "A skip: without CAP_SYS_ADMIN the kernel returns only the first 64 bytes of config space, which hold no capabilities. Run as root (the Kubernetes init container does).",
    step: None,
};
const NO_SWITCH: FindingCode = FindingCode {
    code: "PCI204",
    title: "no PCIe switch between a GPU and its peers",
    explanation:
        "A skip: GPU peer traffic crosses the root complex (PHB or farther) whatever ACS says.",
    step: None,
};
const CONFIG_UNREADABLE: FindingCode = FindingCode {
    code: "PCI205",
    title: "a switch port's config space or ACS capability cannot be read",
    explanation: "An error: the port's config space could not be read or parsed, so whether ACS redirects peer traffic is unknown.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "No ACS P2P redirect on PCIe switch ports between GPUs and their NICs, NVMe drives and peer GPUs",
    needs: &[Need::Root, Need::Gpu],
    explain: Explain {
        reads: "/sys/bus/pci/devices/<bdf>/config of every switch port between a GPU and a peer (capability list \
                from 0x34, extended list from 0x100, ACS at ID 0x000D: control register at +6); /proc/cpuinfo, \
                /sys/hypervisor/type and DMI to recognise a VM",
        why: "With ACS Request or Completion Redirect enabled on a switch downstream port, GPU↔NIC and GPU↔NVMe peer \
              traffic is sent up to the root complex instead of across the switch: GPUDirect RDMA and GDS lose \
              most of their bandwidth or stop working, while nothing reports an error. Linux enables ACS whenever \
              it finds an IOMMU. Root ports with ACS are normal; inside a VM ACS belongs to the host.",
        fixes: &[
            ("ACS redirect on a switch downstream port", "disable PCIe ACS in the BIOS; or boot with `pci=disable_acs_redir=<bdf>[;<bdf>...]`; at runtime `setpci -s <bdf> ECAP_ACS+0x6.w=0000` (lost on reboot)"),
            ("config space not readable", "run as root (CAP_SYS_ADMIN in the initial user namespace): the kernel returns only 64 bytes otherwise"),
        ],
    },
    // In a VM the guest's ports are virtual: ACS is the host's (the check skips there).
    meaningful: &[Environment::BareMetal, Environment::Container],
    findings: &[
        &ACS_REDIRECT,
        &IN_VM,
        &NEEDS_ROOT,
        &NO_SWITCH,
        &CONFIG_UNREADABLE,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for PcieAcs {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let tree = PciTree::read(cx.host)?;
    let facts = Facts::read(cx.host, &tree);
    Ok(tree.completed(ID, DATA_PATHS, judge(&tree, &facts)))
}

/// What the check reads beyond the PCIe tree, before it judges.
struct Facts {
    /// Whether this is a VM; read only when there is a GPU.
    vm: Option<Result<Hypervisor, ReadError>>,
    /// Switch port → the peer pairs whose traffic it carries (from the tree; empty in a VM).
    ports: BTreeMap<usize, Vec<String>>,
    /// Each such port's config space, in port order; reading stops at the first that needs root.
    configs: Vec<Result<ConfigSpace, ConfigReadError>>,
}

impl Facts {
    fn read(host: &Host, tree: &PciTree) -> Facts {
        let mut facts = Facts {
            vm: None,
            ports: BTreeMap::new(),
            configs: Vec::new(),
        };
        let gpus = tree.with_role(Role::Gpu);
        if gpus.is_empty() {
            return facts;
        }
        let vm = hypervisor::detect(host);
        let in_vm = vm.as_ref().map_or(true, |vm| vm.is_vm());
        facts.vm = Some(vm);
        if in_vm {
            return facts;
        }
        facts.ports = peer_ports(tree, &gpus);
        for &port in facts.ports.keys() {
            let config = read_config(host, &tree.nodes[port].bdf.to_string());
            let needs_root = config.as_ref().is_err_and(|e| e.needs_root());
            facts.configs.push(config);
            if needs_root {
                break;
            }
        }
        facts
    }
}

/// Switch port → the GPU↔peer pairs (GPU, NIC, NVMe drive) whose traffic crosses it.
fn peer_ports(tree: &PciTree, gpus: &[usize]) -> BTreeMap<usize, Vec<String>> {
    let peers: Vec<usize> = [Role::Gpu, Role::Nic, Role::Nvme]
        .into_iter()
        .flat_map(|r| tree.with_role(r))
        .collect();
    let mut ports: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for &g in gpus {
        for &p in &peers {
            if p == g || (tree.nodes[p].role == Role::Gpu && p < g) {
                continue;
            }
            for b in tree.bridges_between(g, p).unwrap_or_default() {
                ports.entry(b).or_default().push(format!(
                    "{}↔{}",
                    tree.short_name(g),
                    tree.short_name(p)
                ));
            }
        }
    }
    ports
}

fn judge(tree: &PciTree, facts: &Facts) -> Vec<CheckResult> {
    let Some(vm) = &facts.vm else {
        return vec![tree.nothing_found(
            ID,
            DATA_PATHS,
            CheckResult::skip(ID, "no GPU: no GPU peer path to check").code(&common::ABSENT),
        )];
    };
    let vm = match vm {
        Ok(vm) => vm,
        Err(e) => return vec![CheckResult::read_error(ID, e)],
    };
    if vm.is_vm() {
        let mut r = CheckResult::skip(
                ID,
                "not applicable in a VM: guest PCIe ports are virtual and ACS is the host's isolation; measure P2P/GDR bandwidth instead",
            ).code(&IN_VM);
        r.evidence = vm.signals.clone();
        return vec![r];
    }
    let ports = &facts.ports;
    if ports.is_empty() {
        return vec![CheckResult::pass(
                ID,
                "no PCIe switch between a GPU and its peers: their traffic crosses the root complex (PHB or farther) whatever ACS says",
            ).code(&NO_SWITCH)];
    }

    let mut results = Vec::new();
    let mut clean = Vec::new();
    for ((&port, pairs), config) in ports.iter().zip(&facts.configs) {
        let bdf = tree.nodes[port].bdf.to_string();
        let subject = tree.subject(port);
        let config_path = format!("/sys/bus/pci/devices/{bdf}/config");
        let config = match config {
            Ok(c) => c,
            Err(e) if e.needs_root() => {
                return vec![CheckResult::skip(
                        ID,
                        "needs root: without CAP_SYS_ADMIN the kernel returns only the 64-byte config header, which has no capabilities",
                    )
                    .evidence(&config_path, e).code(&NEEDS_ROOT)];
            }
            Err(e) => {
                results.push(
                    CheckResult::error(ID, format!("{e}"))
                        .subject(subject)
                        .evidence(&config_path, e)
                        .code(&CONFIG_UNREADABLE),
                );
                continue;
            }
        };
        let acs = match config.acs() {
            Ok(a) => a,
            Err(e) => {
                results.push(
                    CheckResult::error(ID, format!("{e}"))
                        .subject(subject)
                        .evidence(&config_path, e)
                        .code(&CONFIG_UNREADABLE),
                );
                continue;
            }
        };
        let downstream = tree.nodes[port].role == Role::SwitchDownstream;
        match acs {
            Some(acs) if downstream && acs.redirects() => {
                let shown: Vec<&str> = pairs.iter().take(4).map(String::as_str).collect();
                results.push(
                        CheckResult::fail(
                            ID,
                            format!(
                                "ACS redirect enabled ({}): peer traffic {}{} is forced up to the root complex",
                                acs.control_names(),
                                shown.join(", "),
                                if pairs.len() > shown.len() { format!(" and {} more", pairs.len() - shown.len()) } else { String::new() }
                            ),
                        )
                        .subject(subject)
                        .evidence(&format!("{config_path} [ACS @0x{:x} control]", acs.offset), format!("0x{:04x} {}", acs.control, acs.control_names()))
                        .fix(format!(
                            "disable ACS in the BIOS, or boot with `pci=disable_acs_redir={bdf}`; now: `setpci -s {bdf} ECAP_ACS+0x6.w=0000` (lost on reboot)"
                        )).code(&ACS_REDIRECT),
                    );
            }
            Some(acs) => clean.push(format!(
                "{config_path} [ACS control] = 0x{:04x} ({}, {})",
                acs.control,
                tree.nodes[port].role.as_str(),
                acs.control_names()
            )),
            None => clean.push(format!(
                "{config_path} [ACS] = <no ACS capability> ({})",
                tree.nodes[port].role.as_str()
            )),
        }
    }
    if results.is_empty() {
        let mut r = CheckResult::pass(
            ID,
            format!(
                "no ACS redirect on the {} switch port(s) between GPUs and their peers",
                ports.len()
            ),
        );
        r.evidence = clean;
        results.push(r);
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;
    use crate::probes::testing::{run_on, verdicts};

    #[test]
    fn hgx_no_redirect_passes_despite_root_port_and_nvswitch_acs() {
        let r = run_on(&PcieAcs, "hgx-healthy", "generic");
        assert_eq!(verdicts(&r), [(String::new(), Status::Pass)], "{r:#?}");
    }

    #[test]
    fn redirect_on_two_downstream_ports_fails_naming_them() {
        let r = run_on(&PcieAcs, "acs-redirect", "generic");
        assert_eq!(
            verdicts(&r),
            [
                (
                    "switch downstream port 0000:17:00.0".to_string(),
                    Status::Fail
                ),
                (
                    "switch downstream port 0000:39:01.0".to_string(),
                    Status::Fail
                )
            ]
        );
        assert!(r[0].summary.contains("GPU0↔NIC0"), "{}", r[0].summary);
        assert!(r[0]
            .remediation
            .as_deref()
            .unwrap()
            .contains("setpci -s 0000:17:00.0"));
    }

    /// hgx-healthy as an unprivileged reader sees it: every config file cut to its 64-byte header.
    fn header_only_copy() -> tempfile::TempDir {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let devices = dir.path().join("sys/bus/pci/devices");
        for entry in std::fs::read_dir(&devices).unwrap() {
            let config = entry.unwrap().path().join("config");
            let bytes = std::fs::read(&config).unwrap();
            std::fs::write(&config, &bytes[..64]).unwrap();
        }
        dir
    }

    #[test]
    fn header_only_config_skips_needing_root() {
        let dir = header_only_copy();
        let host = crate::host::Host::at(dir.path()).unwrap();
        let tree = PciTree::read(&host).unwrap();
        let (g, n) = (tree.with_role(Role::Gpu)[0], tree.rdma_nics()[0]);
        assert_eq!(
            tree.distance(g, n),
            crate::rules::topology::PcieDistance::PIX,
            "port roles inferred from the tree when config space is hidden"
        );
        let r = crate::probes::testing::run_on_root(&PcieAcs, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Skip, "{r:#?}");
        assert!(r[0].summary.contains("needs root"), "{}", r[0].summary);
    }

    #[test]
    fn h200_vm_is_not_applicable() {
        let r = run_on(&PcieAcs, "h200-vm-no-rdma", "generic");
        assert_eq!(r[0].status, Status::Skip);
        assert!(r[0].summary.contains("VM"));
    }
}
