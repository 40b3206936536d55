//! `pcie.iommu`: is DMA from GPUs, NICs and NVMe drives translated by an IOMMU (`DMA`/`DMA-FQ` groups) or not
//! (no IOMMU, or passthrough `identity` groups)?

use std::collections::BTreeMap;

use crate::host::{Host, ReadError};
use crate::probe::{CheckResult, Context, Explain, FindingCode, Probe, ProbeMeta, Remedy};
use crate::profile::{Expect, IommuExpect};
use crate::rules::topology::{PciTree, Role, DATA_ENDPOINTS};
use crate::sysfs::iommu::{iommu_parameters, read_groups, IommuGroup, IOMMU_GROUPS, PROC_CMDLINE};

pub struct PcieIommu;

const ID: &str = "pcie.iommu";

const FIX: &str = "boot with `iommu=pt` (Intel: `intel_iommu=on iommu=pt`; AMD: `amd_iommu=on iommu=pt`) or disable the IOMMU \
(`intel_iommu=off` / `amd_iommu=off`) where device assignment is not needed; update-grub and reboot";

const TRANSLATED_REQUIRED: FindingCode = FindingCode {
    code: "PCI301",
    title: "translated DMA on data-path devices and the profile requires passthrough",
    explanation: "IOMMU groups of type DMA/DMA-FQ translate every GPU, NIC and NVMe DMA: GPUDirect RDMA and GDS want the IOMMU off or in passthrough (`iommu=pt` / `intel_iommu=on iommu=pt` on the kernel command line, then a reboot). The profile requires passthrough.",
    step: Some(Remedy::Reboot),
};
const TRANSLATED: FindingCode = FindingCode {
    code: "PCI302",
    title: "translated DMA on the devices of a GPU peer path",
    explanation: "IOMMU groups of type DMA/DMA-FQ on a node with GPU peer paths: GPUDirect RDMA and GDS want the IOMMU off or in passthrough (`iommu=pt`, then a reboot).",
    step: Some(Remedy::Reboot),
};
const TYPE_UNREADABLE: FindingCode = FindingCode {
    code: "PCI303",
    title: "the domain type of IOMMU groups is unreadable",
    explanation: "An error: /sys/kernel/iommu_groups/*/type could not be read, so passthrough cannot be told from translated DMA. Read it as root.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "IOMMU off or passthrough for GPUs, NICs and NVMe drives (translated DMA hurts GPUDirect RDMA and GDS)",
    explain: Explain {
        reads: "/sys/kernel/iommu_groups/<N>/{type,devices/}, /proc/cmdline (iommu=, intel_iommu=, amd_iommu=, iommu.*), \
                device classes under /sys/bus/pci/devices",
        why: "With translated DMA (group type DMA or DMA-FQ) every peer-to-peer transfer between a NIC or NVMe drive \
              and GPU memory goes through IOMMU page tables and, without ATS, through the root complex. NVIDIA's GDS \
              guide wants the IOMMU off or in passthrough; GPUDirect RDMA loses bandwidth or fails with DMA faults.",
        fixes: &[("translated DMA on GPU/NIC/NVMe groups", FIX)],
    },
    findings: &[
        &TRANSLATED_REQUIRED,
        &TRANSLATED,
        &TYPE_UNREADABLE,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for PcieIommu {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(
            ID,
            Facts::read(cx.host).map(|facts| judge(&facts, &cx.profile.expect)),
        )
    }
}

/// What the check reads, before it judges.
struct Facts {
    groups: Vec<IommuGroup>,
    /// The kernel command line; only evidence, but one that cannot be read is a node this check cannot vouch
    /// for.
    cmdline: String,
    /// Read only when there are IOMMU groups: which devices they hold.
    tree: Option<PciTree>,
}

impl Facts {
    fn read(host: &Host) -> Result<Facts, ReadError> {
        let groups = read_groups(host)?;
        let cmdline = host.read(PROC_CMDLINE)?;
        let tree = if groups.is_empty() {
            None
        } else {
            Some(PciTree::read(host)?)
        };
        Ok(Facts {
            groups,
            cmdline,
            tree,
        })
    }
}

fn judge(facts: &Facts, expect: &Expect) -> Vec<CheckResult> {
    let iommu = expect.iommu;
    let groups = &facts.groups;
    let params = iommu_parameters(&facts.cmdline);
    let params_text = if params.is_empty() {
        // Shown whole, so what was read is on record when no parameter was found in it.
        format!("<no IOMMU parameters> in {:?}", facts.cmdline)
    } else {
        params.join(" ")
    };
    let Some(tree) = &facts.tree else {
        return vec![CheckResult::pass(
            ID,
            "no IOMMU groups: the IOMMU is off or absent, device DMA is not translated",
        )
        .evidence(IOMMU_GROUPS, "<empty or absent>")
        .evidence(&format!("{PROC_CMDLINE} [iommu]"), &params_text)];
    };
    let role_of = |bdf: &str| {
        tree.find(bdf)
            .map(|i| (tree.nodes[i].role, tree.subject(i)))
            .filter(|(role, _)| role.is_endpoint_of_interest())
    };
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    let mut translated: Vec<String> = Vec::new();
    let mut evidence = Vec::new();
    for g in groups {
        let kind = match (&g.domain_type, &g.type_unreadable) {
            (Some(t), _) => t.clone(),
            (None, Some(_)) => "<unreadable type>".into(),
            (None, None) => "<no type file>".into(),
        };
        *by_type.entry(kind.clone()).or_default() += 1;
        let members: Vec<String> = g
            .devices
            .iter()
            .filter_map(|d| role_of(d).map(|(_, s)| s))
            .collect();
        if !members.is_empty() {
            evidence.push(format!(
                "{IOMMU_GROUPS}/{}/type = {kind} ({})",
                g.id,
                members.join(", ")
            ));
            if g.is_translated() {
                translated.extend(members);
            }
        }
    }
    let types: Vec<String> = by_type.iter().map(|(k, n)| format!("{n} {k}")).collect();
    evidence.insert(0, format!("{PROC_CMDLINE} [iommu] = {params_text}"));
    evidence.insert(
        1,
        format!(
            "{IOMMU_GROUPS} = {} group(s): {}",
            groups.len(),
            types.join(", ")
        ),
    );

    let unknown: Vec<&(String, String)> = groups
        .iter()
        .filter_map(|g| g.type_unreadable.as_ref())
        .collect();
    // Groups of unknown type leave the verdict open unless the translated ones already fail it.
    let fails_anyway = !translated.is_empty() && matches!(iommu, Some(IommuExpect::Passthrough));
    let mut r = if !unknown.is_empty() && !fails_anyway {
        for (path, why) in &unknown {
            evidence.push(format!("{path} = {why}"));
        }
        CheckResult::error(
                ID,
                format!(
                    "the domain type of {} IOMMU group(s) is unreadable: cannot tell passthrough from translated DMA",
                    unknown.len()
                ),
            )
            .fix("read /sys/kernel/iommu_groups/*/type as root; `dmesg | grep -i iommu` shows the default domain type").code(&TYPE_UNREADABLE)
    } else if translated.is_empty() {
        CheckResult::pass(
            ID,
            format!(
                "IOMMU in passthrough for GPUs, NICs and NVMe drives ({})",
                types.join(", ")
            ),
        )
    } else {
        let gpus = !tree.with_role(Role::Gpu).is_empty();
        let peers = !tree.rdma_nics().is_empty() || !tree.with_role(Role::Nvme).is_empty();
        let data_path_node =
            (gpus && peers) || expect.gdr == Some(true) || expect.gds == Some(true);
        let shown: Vec<&str> = translated.iter().take(3).map(String::as_str).collect();
        let summary = format!(
                "translated DMA (IOMMU groups of type DMA/DMA-FQ) for {} device(s), e.g. {}: GPUDirect RDMA and GDS want the IOMMU off or passthrough",
                translated.len(),
                shown.join(", ")
            );
        match iommu {
            Some(IommuExpect::Passthrough) => {
                CheckResult::fail(ID, format!("{summary}; the profile requires passthrough"))
                    .fix(FIX)
                    .code(&TRANSLATED_REQUIRED)
            }
            Some(IommuExpect::Any) => CheckResult::pass(
                ID,
                format!("{summary} (the profile accepts translated DMA)"),
            ),
            None if data_path_node => CheckResult::warn(ID, summary).fix(FIX).code(&TRANSLATED),
            None => CheckResult::pass(ID, format!("{summary} (no GPU peer path on this node)")),
        }
    };
    r.evidence = evidence;
    tree.completed(ID, DATA_ENDPOINTS, vec![r])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;
    use crate::probes::testing::run_on;

    #[test]
    fn no_groups_passes() {
        assert_eq!(
            run_on(&PcieIommu, "hgx-healthy", "hgx-h100-ib")[0].status,
            Status::Pass
        );
        assert_eq!(
            run_on(&PcieIommu, "h200-vm-no-rdma", "generic")[0].status,
            Status::Pass
        );
    }

    #[test]
    fn identity_groups_pass() {
        let r = run_on(&PcieIommu, "nvidia-fs-missing", "hgx-h100-ib");
        assert_eq!(r[0].status, Status::Pass, "{r:#?}");
        assert!(r[0].summary.contains("passthrough"));
    }

    #[test]
    fn translated_warns_generic_fails_passthrough_profile() {
        let r = run_on(&PcieIommu, "iommu-translated", "generic");
        assert_eq!(r[0].status, Status::Warn, "{r:#?}");
        assert!(
            r[0].summary.contains("GPU0 0000:18:00.0"),
            "{}",
            r[0].summary
        );
        assert!(r[0].evidence[0].contains("intel_iommu=on"));
        assert_eq!(
            run_on(&PcieIommu, "iommu-translated", "hgx-h100-ib")[0].status,
            Status::Fail
        );
    }

    /// Reproduced: with the PCI device list unreadable no group member was known to be a GPU, NIC or drive, and
    /// passthrough was concluded from nothing.
    #[test]
    fn unreadable_pci_device_list_is_an_error_not_a_pass() {
        let dir = crate::probes::testing::copy_scenario("iommu-translated");
        let devices = dir.path().join("sys/bus/pci/devices");
        std::fs::rename(&devices, dir.path().join("devices.aside")).unwrap();
        std::os::unix::fs::symlink("devices", &devices).unwrap();
        let r = crate::probes::testing::run_on_root(&PcieIommu, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Error, "{:#?}", r[0]);
        assert!(
            r[0].summary.contains("/sys/bus/pci/devices"),
            "{}",
            r[0].summary
        );
    }

    #[test]
    fn unreadable_group_type_is_an_error_not_passthrough() {
        let dir = crate::probes::testing::copy_scenario("iommu-translated");
        let groups = dir.path().join("sys/kernel/iommu_groups");
        for g in std::fs::read_dir(&groups).unwrap() {
            let ty = g.unwrap().path().join("type");
            std::fs::remove_file(&ty).unwrap();
            std::fs::create_dir(&ty).unwrap();
        }
        let r = crate::probes::testing::run_on_root(&PcieIommu, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Error, "{:#?}", r[0]);
        assert!(
            r[0].summary.contains("IOMMU group(s) is unreadable"),
            "{}",
            r[0].summary
        );
        assert!(r[0]
            .evidence
            .iter()
            .any(|e| e.ends_with("/type = <is a directory>")));
    }
}
