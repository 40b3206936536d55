//! `pcie.link`: every GPU, RDMA NIC and NVMe drive, and every link on its path to the root port, runs at the speed
//! and width both ends of that link support.

use crate::host::ReadError;
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Measurement, Probe, ProbeMeta, Remedy,
};
use crate::profile::Expect;
use crate::rules::topology::{PathLink, PciTree, Role, DATA_PATHS};
use crate::sysfs::pci::{device_dir, Link};

pub struct PcieLink;

const ID: &str = "pcie.link";

const FIX: &str = "reseat the device or the riser/cable; check the slot's bifurcation and link-speed settings in the BIOS; \
`lspci -vv -s <bdf>` shows LnkCap/LnkSta; a retrained link (`setpci -s <port> CAP_EXP+10.w=0020:0020`) that stays down-trained points at hardware";

const DEGRADED: FindingCode = FindingCode {
    code: "PCI001",
    title: "a PCIe link on a data path runs below the speed or width both ends support",
    explanation: "A GPU, RDMA NIC or NVMe drive, or a switch port on its way to the root port, trained below what both ends of the link support (the summary names the link, e.g. x8 of x16 or 16 GT/s of 32): every transfer through it is capped. Reseat the card or cable; a link that keeps downtraining is serviced.",
    step: Some(Remedy::ServiceRma),
};
const NOT_EXPRESS: FindingCode = FindingCode {
    code: "PCI002",
    title: "no link attributes: not a PCI Express function",
    explanation: "A skip for a function without link attributes (a virtual function, a conventional PCI device): there is no link to judge.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "PCIe links of GPUs, RDMA NICs and NVMe drives (and every bridge above them) at the speed and width both ends support",
    explain: Explain {
        reads: "/sys/bus/pci/devices/<bdf>/{current,max}_link_{speed,width} for each device and each port on its \
                canonical sysfs path to the root port; class/vendor to find GPUs (0x03xxxx of 0x10de), RDMA NICs \
                (a function with an RDMA device on it, an Omni-Path HFI, a Mellanox network or flash-recovery function) and NVMe. Other network \
                functions (virtio-net, management ports) carry no GPU data path and are named, not judged",
        why: "A GPU or NIC trained to x8 or a lower generation halves its host bandwidth: GPUDirect RDMA, host copies \
              and NCCL all slow down while every functional test still passes. A link is judged by its own two \
              ends: a Gen4 drive in a Gen5 slot is not degraded. A GPU's own link at full width and a lower \
              speed is idle-downshifted (GPUs lower the speed at rest): gpu.pcie judges its speed under load.",
        fixes: &[
            ("link below what both ends support", FIX),
            ("GPU link below the profile's width", "a GPU never lowers its width when idle: reseat the GPU or its riser; if it stays low, RMA"),
        ],
    },
    findings: &[
        &DEGRADED,
        &NOT_EXPRESS,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for PcieLink {
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
    let devices: Vec<usize> = [Role::Gpu, Role::Nic, Role::Nvme]
        .into_iter()
        .flat_map(|role| tree.with_role(role))
        .collect();
    if devices.is_empty() {
        let mut nothing = CheckResult::skip(ID, "no GPU, RDMA NIC or NVMe drive on the PCI bus")
            .code(&common::ABSENT);
        // A plain Ethernet function (virtio-net under soft-RoCE, a management port) carries no GPU data
        // path: name it, so "nothing judged" is not read as "no NIC seen".
        for node in tree.nodes.iter().filter(|n| n.attrs.is_network()) {
            nothing = nothing.note(format!(
                "{} network function {:04x}:{:04x} not judged: no RDMA device on it",
                node.bdf, node.attrs.vendor, node.attrs.device
            ));
        }
        return Ok(vec![tree.nothing_found(ID, DATA_PATHS, nothing)]);
    }
    let results: Vec<CheckResult> = devices
        .into_iter()
        .map(|i| judge_device(&tree, i, &cx.profile.expect))
        .collect();
    Ok(tree.completed(ID, DATA_PATHS, results))
}

fn judge_device(tree: &PciTree, i: usize, expect: &Expect) -> CheckResult {
    let node = &tree.nodes[i];
    let subject = tree.subject(i);
    let dir = device_dir(&node.bdf.to_string());
    match &node.attrs.link {
        Link::Absent => {
            return CheckResult::skip(
                ID,
                "no link attributes (not a PCI Express function, e.g. a virtual function)",
            )
            .subject(subject)
            .evidence(&format!("{dir}/current_link_speed"), "<missing>")
            .code(&NOT_EXPRESS);
        }
        Link::Unreadable(path, why) => {
            return CheckResult::error(ID, format!("cannot read its link: {path} = {why}"))
                .subject(subject)
                .evidence(path, why)
                .code(&common::UNREAD);
        }
        Link::Present(_) => {}
    }
    // A port above whose link cannot be read hides what this device's path runs at.
    let unread_above: Vec<String> = tree
        .ancestors(i)
        .into_iter()
        .filter_map(|a| match &tree.nodes[a].attrs.link {
            Link::Unreadable(path, why) => Some(format!("{path} = {why}")),
            _ => None,
        })
        .collect();
    if !unread_above.is_empty() {
        let mut r = CheckResult::error(
            ID,
            format!(
                "cannot read the link of a port on its path: {}",
                unread_above.join("; ")
            ),
        )
        .subject(subject)
        .code(&common::UNREAD);
        r.evidence = unread_above;
        return r;
    }
    let links = tree.links_to_root(i);
    let evidence: Vec<String> = links
        .iter()
        .map(|l| format!("link {}", l.describe(tree)))
        .collect();
    let own = links[0];
    // GPUs lower their link speed at rest, never the width: the GPU's own link at full width and only slower
    // is idle-downshifted, and its speed is judged under load by gpu.pcie. Every other link (NIC, NVMe,
    // switch uplinks) has no such mode.
    let idle = node.role == Role::Gpu && own.is_slower_only();
    let degraded: Vec<&PathLink> = links
        .iter()
        .filter(|l| l.is_degraded() && !(idle && l.lower == i))
        .collect();
    let narrowest = tree.narrowest_link(i).unwrap_or(own);
    let mut failures: Vec<String> = degraded
        .iter()
        .map(|l| {
            format!(
                "link {} runs at {} x{}, both ends support {} x{}",
                link_ends(tree, l),
                l.current_speed,
                l.current_width,
                l.capable_speed,
                l.capable_width
            )
        })
        .collect();

    let mut gen_measure = Measurement::new(
        "link_gen",
        f64::from(own.current_speed.generation().unwrap_or(0)),
        "gen",
    );
    let mut width_measure = Measurement::new("link_width", f64::from(own.current_width), "lanes");
    gen_measure.fail = own
        .capable_speed
        .generation()
        .map(f64::from)
        .filter(|_| !idle);
    width_measure.fail = Some(f64::from(own.capable_width));
    if node.role == Role::Gpu {
        if let Some(gen) = expect.gpu_pcie_gen.filter(|_| !idle) {
            gen_measure.fail = Some(f64::from(gen));
            if own.current_speed.generation().is_none_or(|g| g < gen) {
                failures.push(format!(
                    "runs at {}, the profile expects Gen{gen}",
                    own.current_speed
                ));
            }
        }
        if let Some(width) = expect.gpu_pcie_width {
            width_measure.fail = Some(f64::from(width));
            if own.current_width < u32::from(width) {
                failures.push(format!(
                    "runs at x{}, the profile expects x{width}",
                    own.current_width
                ));
            }
        }
    }

    let narrowest_text = format!(
        "narrowest link {} at {} x{}",
        link_ends(tree, &narrowest),
        narrowest.current_speed,
        narrowest.current_width
    );
    let mut r = if failures.is_empty() && idle {
        CheckResult::pass(
            ID,
            format!(
                "{} x{}: idle-downshifted (full width, speed below the {} both ends support, as GPUs run at rest); its speed under load is gpu.pcie's verdict; {} link(s) to the root port; {narrowest_text}",
                own.current_speed,
                own.current_width,
                own.capable_speed,
                links.len()
            ),
        )
    } else if failures.is_empty() {
        CheckResult::pass(
            ID,
            format!(
                "{} x{}, {} link(s) to the {} at full speed and width; {narrowest_text}",
                own.current_speed,
                own.current_width,
                links.len(),
                if own.upper.is_none() && links.len() == 1 {
                    "host bridge"
                } else {
                    "root port"
                }
            ),
        )
    } else {
        CheckResult::fail(ID, format!("{}; {narrowest_text}", failures.join("; "))).fix(FIX).code(&DEGRADED)
    }
    .subject(subject)
    .measure(gen_measure)
    .measure(width_measure);
    r.evidence = evidence;
    if own.upper.is_none() {
        r = r.note("the device sits directly on the host bridge: no upstream port to compare with, judged by its own maximum");
    }
    if idle {
        r = r.note(format!(
            "{}: GPUs lower the link speed when idle and train back under load; gpu.pcie re-reads it while a copy runs on every GPU",
            expect_gen_note(expect)
        ));
    } else if node.role == Role::Gpu && !failures.is_empty() {
        r = r.note("GPUs may lower their link speed when idle; the GPU probes re-check under load");
    }
    r
}

/// What the profile wants of a GPU link's speed, for the idle note.
fn expect_gen_note(expect: &Expect) -> String {
    match expect.gpu_pcie_gen {
        Some(gen) => format!("the profile's Gen{gen} is judged under load"),
        None => "speed not judged at rest".to_string(),
    }
}

fn link_ends(tree: &PciTree, l: &PathLink) -> String {
    match l.upper {
        Some(u) => format!("{} → {}", tree.nodes[u].bdf, tree.nodes[l.lower].bdf),
        None => format!("host bridge → {}", tree.nodes[l.lower].bdf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;
    use crate::probes::testing::{run_on, verdicts};

    #[test]
    fn hgx_every_link_at_full_width_passes() {
        let r = run_on(&PcieLink, "hgx-healthy", "hgx-h100-ib");
        assert_eq!(r.len(), 8 + 8 + 4);
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
        assert_eq!(r[0].subject.as_deref(), Some("GPU0 0000:18:00.0"));
    }

    #[test]
    fn x8_gpu_and_nic_fail_by_name() {
        let r = run_on(&PcieLink, "link-degraded-x8", "generic");
        let bad: Vec<_> = verdicts(&r)
            .into_iter()
            .filter(|(_, s)| *s != Status::Pass)
            .collect();
        assert_eq!(
            bad,
            [
                ("GPU3 0000:4b:00.0".to_string(), Status::Fail),
                ("NIC5 0000:aa:00.0".to_string(), Status::Fail)
            ]
        );
        let gpu = r.iter().find(|x| x.status == Status::Fail).unwrap();
        assert!(
            gpu.summary.contains("x8, both ends support 32.0 GT/s x16"),
            "{}",
            gpu.summary
        );
        assert!(gpu.evidence.iter().any(|e| e.contains("idle")));
    }

    #[test]
    fn h200_gpu_on_host_bridge_gen5_x16_passes() {
        let r = run_on(&PcieLink, "h200-vm-no-rdma", "hgx-h200-ib");
        assert_eq!(
            verdicts(&r),
            [("GPU0 0000:00:06.0".to_string(), Status::Pass)]
        );
        assert!(r[0].summary.contains("32.0 GT/s x16"), "{}", r[0].summary);
    }

    #[test]
    fn unreadable_class_files_are_an_error_not_an_empty_bus() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let mut emptied = 0;
        for entry in std::fs::read_dir(dir.path().join("sys/bus/pci/devices")).unwrap() {
            let class = std::fs::canonicalize(entry.unwrap().path())
                .unwrap()
                .join("class");
            std::fs::write(class, "").unwrap();
            emptied += 1;
        }
        let r = crate::probes::testing::run_on_root(&PcieLink, dir.path(), "generic");
        assert_eq!(r.len(), 1, "{r:#?}");
        assert_eq!(r[0].status, Status::Error);
        assert!(
            r[0].summary
                .starts_with(&format!("{emptied} PCI function(s) could not be read")),
            "{}",
            r[0].summary
        );
        assert!(
            r[0].evidence[0].ends_with("/class = <not a hex number: \"\">"),
            "{:?}",
            r[0].evidence
        );
    }

    #[test]
    fn plain_ethernet_function_is_named_not_judged() {
        // The soft-RoCE VM: rxe0 rides a virtio-net function that no RDMA device sits on.
        let r = run_on(&PcieLink, "rxe-vm", "generic");
        assert_eq!(verdicts(&r), [(String::new(), Status::Skip)]);
        assert!(
            r[0].summary.contains("no GPU, RDMA NIC or NVMe drive"),
            "{}",
            r[0].summary
        );
        assert!(
            r[0].evidence
                .iter()
                .any(|e| e.contains("0000:00:02.0 network function 1af4:1000 not judged")),
            "{:?}",
            r[0].evidence
        );
    }

    /// A GPU behind a ConnectX-8 SuperNIC's switch: Gen6 x16 to the switch, the switch's Gen5 x16 uplink above
    /// it. Each link is judged by its own two ends (the uplink is the design, not a down-trained link), the GPU's
    /// own link against the profile's Gen6; on x86 HGX B300 and on a GB300 tray (the switch on the GPU's segment).
    #[test]
    fn a_gen5_uplink_above_a_gen6_gpu_is_the_design() {
        for (tree, profile, gpu) in [
            ("hgx-b300-cx8", "hgx-b300-ib", "0000:18:00.0"),
            ("gb300-tray-cx8", "gb300-nvl72-ib", "0008:06:00.0"),
        ] {
            let r = run_on(&PcieLink, tree, profile);
            assert!(r.iter().all(|x| x.status == Status::Pass), "{tree}: {r:#?}");
            let g = r
                .iter()
                .find(|x| x.subject.as_deref().is_some_and(|s| s.ends_with(gpu)))
                .unwrap();
            assert!(
                g.summary.starts_with("64.0 GT/s x16, ")
                    && g.summary.contains("→")
                    && g.summary.contains("at 32.0 GT/s x16"),
                "{tree}: {}",
                g.summary
            );
        }
    }

    /// The same GPU trained to x8 on its Gen6 port fails, on either machine; the Gen5 uplink is not named as a
    /// fault.
    #[test]
    fn a_gpu_trained_down_behind_the_supernic_fails() {
        for (tree, profile, gpu) in [
            ("hgx-b300-cx8-gpu-x8", "hgx-b300-ib", "GPU2"),
            ("gb300-tray-cx8-gpu-x8", "gb300-nvl72-ib", "GPU1"),
        ] {
            let r = run_on(&PcieLink, tree, profile);
            let failed: Vec<&CheckResult> = r.iter().filter(|x| x.status == Status::Fail).collect();
            assert_eq!(failed.len(), 1, "{tree}: {r:#?}");
            let s = &failed[0].summary;
            assert!(
                failed[0].subject.as_deref().unwrap().starts_with(gpu),
                "{tree}: {s}"
            );
            assert!(
                s.contains("runs at 64.0 GT/s x8, both ends support 64.0 GT/s x16")
                    && !s.contains("32.0 GT/s x8"),
                "{tree}: {s}"
            );
        }
    }
}
