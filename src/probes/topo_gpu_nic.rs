//! `topo.gpu_nic`: each GPU has an RDMA NIC close enough for GPUDirect RDMA (PIX or PXB, as `nvidia-smi topo -m`
//! labels it).

use crate::host::ReadError;
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Measurement, Need, Probe, ProbeMeta,
    Remedy, Status,
};
use crate::profile::Expect;
use crate::rules::grace;
use crate::rules::topology::PcieDistance;
use crate::rules::topology::{numa_label, PciTree, Role, GPU_NIC_PATHS};

pub struct TopoGpuNic;

const ID: &str = "topo.gpu_nic";

/// NCCL's default GDR distance limit (`NCCL_NET_GDR_LEVEL`): PXB.
const DEFAULT_MAX: PcieDistance = PcieDistance::PXB;

const NIC_TOO_FAR: FindingCode = FindingCode {
    code: "TOP001",
    title: "a GPU's nearest RDMA NIC is farther than the profile allows",
    explanation: "NCCL uses GPUDirect RDMA only up to NCCL_NET_GDR_LEVEL (by default a NIC behind the same PCIe switch): a GPU whose nearest NIC is farther stages every transfer through host memory. Place a NIC behind the GPU's switch (a hardware change), or accept the staging.",
    step: Some(Remedy::ServiceRma),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "Each GPU has an RDMA NIC within PIX/PXB on the PCIe tree (nvidia-smi topo -m distance)",
    needs: &[Need::Gpu, Need::RdmaDevice],
    explain: Explain {
        reads: "canonical sysfs paths of /sys/bus/pci/devices/* (host bridge, root port and switch chain), numa_node, \
                vendor/device (Grace-attached GPUs: GH200, GB200, GB300 reach their CPU over NVLink-C2C), \
                /sys/class/infiniband/<dev>/device (which PCI function is which NIC)",
        why: "NCCL uses GPUDirect RDMA only when the NIC is within NCCL_NET_GDR_LEVEL of the GPU (PXB by default). \
              A GPU whose nearest NIC is across the host bridge, another root complex or the CPU interconnect \
              (PHB, NODE, SYS) stages every network transfer through host memory; across sockets the bandwidth \
              roughly halves.",
        fixes: &[
            ("GPU without a NIC at PIX/PXB", "move the NIC to a slot behind the GPU's PCIe switch (see `fabric-preflight topo`), or check the BIOS PCIe slot/bifurcation mapping; as a stopgap NCCL_NET_GDR_LEVEL=SYS (slower)"),
        ],
    },
    findings: &[
        &NIC_TOO_FAR,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for TopoGpuNic {
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
    Ok(tree.completed(ID, GPU_NIC_PATHS, judge(&tree, &cx.profile.expect)))
}

fn judge(tree: &PciTree, expect: &Expect) -> Vec<CheckResult> {
    let gpus = tree.with_role(Role::Gpu);
    let nics = tree.rdma_nics();
    if gpus.is_empty() || nics.is_empty() {
        return vec![tree.nothing_found(
            ID,
            GPU_NIC_PATHS,
            CheckResult::skip(
                ID,
                format!(
                    "{} GPU(s), {} RDMA NIC(s): no GPU↔NIC pair to place",
                    gpus.len(),
                    nics.len()
                ),
            )
            .code(&common::ABSENT),
        )];
    }
    let max = expect.gpu_nic_max_distance.unwrap_or(DEFAULT_MAX);
    let too_far = if expect.gpu_nic_distance_fails == Some(true) {
        Status::Fail
    } else {
        Status::Warn
    };
    gpus.iter()
            .enumerate()
            .map(|(ordinal, &g)| {
                let mut pairs: Vec<(PcieDistance, usize)> =
                    nics.iter().map(|&n| (tree.distance(g, n), n)).collect();
                // Among equally distant NICs, name GPU i's partner NIC i (the usual rail mapping).
                let partner = nics.get(ordinal).copied();
                pairs.sort_by_key(|&(d, n)| (d, Some(n) != partner, n));
                let (distance, nic) = pairs[0];
                let nic_node = &tree.nodes[nic];
                let nic_name = format!("{} ({})", nic_node.rdma_devices.join(","), nic_node.bdf);
                let numa = format!(
                    "GPU NUMA {}, NIC NUMA {}",
                    numa_label(&tree.nodes[g]),
                    numa_label(nic_node)
                );
                let subject = tree.subject(g);
                let mut m = Measurement::new("nearest_nic_distance", distance as u8 as f64, "rank (0=PIX..4=SYS)");
                // Grace: the NIC on the GPU's own CPU is reached over NVLink-C2C, the designed GDR path.
                let across_c2c = grace::c2c_attached(&tree.nodes[g].attrs)
                    && matches!(distance, PcieDistance::PHB | PcieDistance::NODE);
                let mut r = if distance <= max {
                    CheckResult::pass(ID, format!("nearest RDMA NIC {nic_name} at {distance:?} ({numa})"))
                } else if across_c2c {
                    CheckResult::pass(ID, format!(
                        "nearest RDMA NIC {nic_name} on this GPU's own Grace CPU, reached over NVLink-C2C ({distance:?} on the PCI tree, {numa}): NCCL uses GPUDirect RDMA there (NCCL_NET_GDR_C2C, on by default)"
                    ))
                } else {
                    CheckResult::new(
                        ID,
                        too_far,
                        format!(
                            "nearest RDMA NIC {nic_name} is {distance:?}, farther than {max:?} ({numa}): NCCL will not use GPUDirect RDMA for this GPU"
                        ),
                    )
                    .fix("place a NIC behind this GPU's PCIe switch (see `fabric-preflight topo`); or accept staging through host memory (NCCL_NET_GDR_LEVEL)").code(&NIC_TOO_FAR)
                };
                m.fail = Some(max as u8 as f64);
                r = r.subject(subject).measure(m);
                for (d, n) in pairs {
                    r = r.note(format!(
                        "{} → {} {} = {d:?}",
                        tree.short_name(g),
                        tree.short_name(n),
                        tree.nodes[n].rdma_devices.join(",")
                    ));
                }
                r
            })
            .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::testing::{copy_scenario, run_on, verdicts};

    #[test]
    fn hgx_every_gpu_has_a_pix_nic() {
        let r = run_on(&TopoGpuNic, "hgx-healthy", "hgx-h100-ib");
        assert_eq!(r.len(), 8);
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
        assert!(
            r[0].summary.contains("mlx5_0 (0000:19:00.0) at PIX"),
            "{}",
            r[0].summary
        );
    }

    #[test]
    fn cross_socket_nics_warn_generic_fail_hgx() {
        let r = run_on(&TopoGpuNic, "nic-cross-socket", "generic");
        assert!(r.iter().all(|x| x.status == Status::Warn), "{r:#?}");
        assert!(r[0].summary.contains("is SYS"), "{}", r[0].summary);
        assert!(
            r[0].summary.contains("GPU NUMA 0, NIC NUMA 1"),
            "{}",
            r[0].summary
        );
        assert!(
            r[3].summary.contains("mlx5_3"),
            "partner NIC named on ties: {}",
            r[3].summary
        );
        let r = run_on(&TopoGpuNic, "nic-cross-socket", "hgx-h100-ib");
        assert_eq!(verdicts(&r).len(), 8);
        assert!(r.iter().all(|x| x.status == Status::Fail));
    }

    /// A GB200 tray (testdata/gen_nvlink_domain.py): every NIC on a Grace root port, so the PCI tree says NODE
    /// for the NICs of the GPU's own Grace; over NVLink-C2C that is where GDR goes, so it passes under a
    /// profile that fails anything past PXB.
    #[test]
    fn grace_tray_nics_across_c2c_pass() {
        for profile in ["generic", "hgx-h100-ib"] {
            let r = run_on(&TopoGpuNic, "gb200-tray", profile);
            assert_eq!(r.len(), 4);
            assert!(
                r.iter().all(|x| x.status == Status::Pass),
                "{profile}: {r:#?}"
            );
            assert!(r[2].summary.contains("mlx5_2 (0010:03:00.0) on this GPU's own Grace CPU, reached over NVLink-C2C (NODE"), "{}", r[2].summary);
        }
    }

    /// The C2C rule is Grace's only: the same tree with x86-attached GPUs (H100 ids) still warns, and a Grace
    /// GPU whose nearest NIC hangs off the other Grace (SYS) is not across C2C.
    #[test]
    fn c2c_rule_needs_a_grace_gpu_and_its_own_cpu() {
        let d = copy_scenario("gb200-tray");
        for gpu in [
            "0008:01:00.0",
            "0009:01:00.0",
            "0018:01:00.0",
            "0019:01:00.0",
        ] {
            let dir = d.path().join(format!("sys/bus/pci/devices/{gpu}/"));
            std::fs::write(dir.join("device"), "0x2330\n").unwrap();
        }
        let r = crate::probes::testing::run_on_root(&TopoGpuNic, d.path(), "generic");
        assert!(r.iter().all(|x| x.status == Status::Warn), "{r:#?}");
        let d = copy_scenario("gb200-tray");
        for nic in ["0000:03:00.0", "0002:03:00.0"] {
            let dir = d.path().join(format!("sys/bus/pci/devices/{nic}/"));
            std::fs::write(dir.join("numa_node"), "1\n").unwrap();
        }
        let r = crate::probes::testing::run_on_root(&TopoGpuNic, d.path(), "generic");
        assert_eq!(
            verdicts(&r).iter().map(|v| v.1).collect::<Vec<_>>(),
            [Status::Warn, Status::Warn, Status::Pass, Status::Pass],
            "{r:#?}"
        );
        assert!(r[0].summary.contains("is SYS"), "{}", r[0].summary);
    }

    #[test]
    fn h200_without_nic_skips() {
        assert_eq!(
            run_on(&TopoGpuNic, "h200-vm-no-rdma", "generic")[0].status,
            Status::Skip
        );
    }

    /// HGX B300: each GPU and its ConnectX-8's NIC function inside the SuperNIC's own switch (PXB): GPUDirect
    /// RDMA's path, not "not under the same switch"; the BlueField-3 storage ports on CPU root ports are farther.
    #[test]
    fn b300_gpus_meet_their_supernic_at_pxb() {
        let r = run_on(&TopoGpuNic, "hgx-b300-cx8", "hgx-b300-ib");
        assert_eq!(r.len(), 8);
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
        for (i, x) in r.iter().enumerate() {
            assert!(
                x.summary
                    .starts_with(&format!("nearest RDMA NIC mlx5_{i} ("))
                    && x.summary.contains(") at PXB"),
                "{}",
                x.summary
            );
        }
    }

    /// Grace trays: every NIC hangs off a Grace root port, so a GPU's rail is NODE; the tray profiles allow it
    /// (NCCL's NET_GDR_C2C), and without them the Grace rule (the NIC on the GPU's own CPU, over C2C) passes it.
    #[test]
    fn grace_tray_rails_across_the_grace_pass_their_profile() {
        for (tree, profile) in [
            ("gb200-tray-ib", "gb200-nvl72-ib"),
            ("gb200-tray-roce", "gb200-nvl72-roce"),
            ("gb300-tray-cx8", "gb300-nvl72-ib"),
        ] {
            let r = run_on(&TopoGpuNic, tree, profile);
            assert_eq!(r.len(), 4);
            assert!(
                r.iter()
                    .all(|x| x.status == Status::Pass && x.summary.contains(" at NODE (")),
                "{tree}: {r:#?}"
            );
            // Without the tray's profile the Grace rule holds: the NIC on the GPU's own Grace is its GDR path.
            assert!(
                run_on(&TopoGpuNic, tree, "generic")
                    .iter()
                    .all(|x| x.status == Status::Pass && x.summary.contains("over NVLink-C2C")),
                "{tree}"
            );
        }
    }
}
