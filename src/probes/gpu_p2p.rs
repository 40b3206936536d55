//! `gpu.p2p`: for every GPU pair, NVML's P2P read/write/atomics/NVLink status and their topology level; on a
//! profile that expects NVLink, a pair without it fails.

use crate::dynlib::nvml::{NvmlFacts, PairFacts, P2P_OK};
use crate::probe::{common, FindingCode, Library, Remedy};
use crate::probe::{CheckResult, Context, Explain, Findings, Kind, Need, Probe, ProbeMeta};
use crate::probes::shared::facts::NVML;
use crate::probes::shared::gpu::{judge_nvml, shown};

pub struct GpuP2p;

const ID: &str = "gpu.p2p";

const FIX_NVLINK: &str = "check `nvidia-smi nvlink -s` and `nvidia-smi -q | grep -i fabric`; on NVSwitch systems start \
nvidia-fabricmanager (`systemctl enable --now nvidia-fabricmanager`) with the same version as the driver";
const FIX_P2P: &str =
    "PCIe P2P is blocked: disable ACS redirection on the switches between the GPUs (BIOS or \
`setpci`), or check that the IOMMU is in passthrough mode (`iommu=pt`)";

const NO_NVLINK_P2P: FindingCode = FindingCode {
    code: "GPU301",
    title: "no NVLink P2P between a GPU pair while the profile expects NVLink",
    explanation: "NVML says the pair cannot use NVLink for P2P while the profile expects NVLink: links down (gpu.nvlink) or the fabric not ready. Reset the GPUs; check the fabric manager.",
    step: Some(Remedy::ResetGpu),
};
const NO_P2P: FindingCode = FindingCode {
    code: "GPU302",
    title: "P2P read or write unsupported between a GPU pair: peer copies are staged through host memory",
    explanation: "NVML reports P2P read or write not OK for the pair: ACS redirect, an IOMMU in translation mode, or a topology without a P2P path (pcie.acs, pcie.iommu). Fix the BIOS settings and reboot.",
    step: Some(Remedy::Reboot),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "GPU peer-to-peer per pair: read, write, atomics, NVLink, topology level",
    needs: &[Need::Gpu],
    kind: Kind::Library,
    libraries: &[Library::Nvml],
    facts: &[&NVML],
    explain: Explain {
        reads: "NVML nvmlDeviceGetP2PStatus (READ, WRITE, ATOMICS, NVLINK) and \
                nvmlDeviceGetTopologyCommonAncestor for every GPU pair",
        why: "NCCL and CUDA peer copies inside a node go over NVLink, or PCIe P2P when there is none. When P2P is \
              unavailable (NVSwitch fabric manager down, ACS redirecting peer traffic to the root complex, a \
              hypervisor blocking it) every intra-node transfer is staged through host memory at a fraction of \
              the speed, and nothing else reports it.",
        fixes: &[
            ("pair without NVLink where the profile expects it", FIX_NVLINK),
            ("pair without P2P read/write", FIX_P2P),
        ],
    },
    findings: &[
        &NO_NVLINK_P2P,
        &NO_P2P,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GpuP2p {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        judge_nvml(cx, ID, |facts, _| {
            judge(facts, cx.profile.expect.nvlink.unwrap_or(false))
        })
    }
}

pub fn judge(facts: &NvmlFacts, expect_nvlink: bool) -> Vec<CheckResult> {
    if facts.gpus.len() < 2 {
        return vec![CheckResult::skip(
            ID,
            format!("{} GPU(s): no pairs to check", facts.gpus.len()),
        )
        .evidence("nvmlDeviceGetCount_v2", shown(&facts.device_count))
        .code(&common::ABSENT)];
    }
    facts
        .pairs
        .iter()
        .map(|p| judge_pair(facts, p, expect_nvlink))
        .collect()
}

fn bus(facts: &NvmlFacts, index: u32) -> String {
    facts
        .gpus
        .iter()
        .find(|g| g.index == index)
        .and_then(|g| g.pci_bus_id.clone().ok())
        .unwrap_or_else(|| format!("GPU {index}"))
}

fn judge_pair(facts: &NvmlFacts, p: &PairFacts, expect_nvlink: bool) -> CheckResult {
    let ok = |a: &Result<String, String>| a.as_deref() == Ok(P2P_OK);
    let mut f = Findings::default();
    if expect_nvlink && !ok(&p.nvlink) {
        f.coded(&NO_NVLINK_P2P)
            .fail(format!("no NVLink P2P ({})", shown(&p.nvlink)), FIX_NVLINK);
    }
    if !ok(&p.read) || !ok(&p.write) {
        f.coded(&NO_P2P).warn(
            format!(
                "P2P read {}, write {}: peer copies are staged through host memory",
                shown(&p.read),
                shown(&p.write)
            ),
            FIX_P2P,
        );
    }
    let yes_no = |a: &Result<String, String>| if ok(a) { "yes" } else { "no" };
    let summary = format!(
        "read {}, write {}, atomics {}, NVLink {}, topology {}",
        yes_no(&p.read),
        yes_no(&p.write),
        yes_no(&p.atomics),
        yes_no(&p.nvlink),
        shown(&p.topology)
    );
    f.result(ID, summary)
        .subject(format!(
            "GPU{} {} <-> GPU{} {}",
            p.a,
            bus(facts, p.a),
            p.b,
            bus(facts, p.b)
        ))
        .evidence("nvmlDeviceGetP2PStatus(READ)", shown(&p.read))
        .evidence("nvmlDeviceGetP2PStatus(WRITE)", shown(&p.write))
        .evidence("nvmlDeviceGetP2PStatus(ATOMICS)", shown(&p.atomics))
        .evidence("nvmlDeviceGetP2PStatus(NVLINK)", shown(&p.nvlink))
        .evidence("nvmlDeviceGetTopologyCommonAncestor", shown(&p.topology))
}
