//! `efa.gdr`: GPUDirect RDMA on EFA. Which path the node has — DMA-BUF (the in-tree efa driver, and amzn's from
//! 2.x, with the open NVIDIA kernel module), or the out-of-tree amzn driver's peer path (its `p2p` attribute
//! naming the provider, the older `gdr` attribute reading 1, or the `efa_nv_peermem` module) — and the proof:
//! GPU memory registered on the protection domain of each GPU's nearest EFA, the registration step
//! `gdr.loopback` does. EFA has no RC queue pairs, so the loopback's transfers do not run here.

use crate::host::ReadError;
use crate::measure::efa_registration::{self, GpuRegistration};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Kind, Need, Probe, ProbeMeta, Remedy,
    Status,
};
use crate::rules::topology::PciTree;
use crate::sysfs::efa::{self, EfaFunction};
use crate::sysfs::modules::Modules;
use crate::sysfs::nvidia::{self, DriverAndKernel};

pub struct EfaGdr;

const ID: &str = "efa.gdr";
/// Vendor-answer key of the registrations.
pub const REGISTRATION_KEY: &str = "verbs.efa_gdr_registration";

const FIX: &str = "use the open NVIDIA kernel module (DMA-BUF, kernel >= 5.12; `nvidia-smi -q | grep -i 'open'`), or \
with AWS's out-of-tree efa driver load `efa_nv_peermem` (aws-efa-installer) so its `p2p` attribute names the \
provider; then check `dmesg | grep -i 'efa.*peer'`";

const NO_PATH: FindingCode = FindingCode {
    code: "EFA401",
    title: "no GPUDirect RDMA path on EFA",
    explanation: "Neither DMA-BUF (the open NVIDIA module) nor the efa driver's peer path (its p2p/gdr attribute, efa_nv_peermem) is there: NCCL stages every transfer through host memory. Use the open NVIDIA kernel module, or load efa_nv_peermem.",
    step: Some(Remedy::LoadModule),
};
const REGISTRATION_FAILED: FindingCode = FindingCode {
    code: "EFA402",
    title: "GPU memory registration on an EFA failed",
    explanation: "Registering GPU memory on the EFA's protection domain failed at the named stage: the GPUDirect path the driver offers does not work. See dmesg; load nvidia_peermem/efa_nv_peermem or use DMA-BUF.",
    step: Some(Remedy::LoadModule),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "GPUDirect RDMA on EFA: the path (DMA-BUF or amzn peer memory) and GPU memory registered on each GPU's nearest EFA",
    needs: &[Need::Gpu, Need::RdmaDevice],
    kind: Kind::Active,
    libraries: &[crate::probe::Library::Verbs, crate::probe::Library::Cuda],
    explain: Explain {
        reads: "/sys/bus/pci/devices/<efa>/{p2p,gdr}, /proc/modules and /sys/module/{efa,efa_nv_peermem}, \
                /proc/driver/nvidia/version, /proc/sys/kernel/osrelease; then per GPU: cuMemAlloc + \
                ibv_reg_dmabuf_mr (else ibv_reg_mr) on the nearest EFA's protection domain",
        why: "aws-ofi-nccl registers NCCL's GPU buffers with the EFA; where no path exists it disables GDR and \
              stages every transfer through host memory. Only a registration the device accepts proves the \
              path: a module file or attribute says only that it may.",
        fixes: &[("no GPUDirect path on EFA, or the registration refused", FIX)],
    },
    findings: &[
        &NO_PATH,
        &REGISTRATION_FAILED,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for EfaGdr {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let functions = efa::read_functions(cx.host)?;
    if functions.iter().all(|f| f.rdma_devices.is_empty()) {
        return Ok(vec![CheckResult::skip(
            ID,
            "no EFA RDMA device on this host",
        )
        .code(&common::ABSENT)]);
    }
    let gpus = nvidia::read_driver_gpus(cx.host)?;
    if gpus.is_empty() {
        return Ok(vec![CheckResult::skip(
            ID,
            "no NVIDIA GPU listed by the driver",
        )
        .code(&common::ABSENT)]);
    }
    let modules = Modules::read(cx.host);
    let state = |name: &str| {
        modules
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|m| m.state(cx.host, name))
    };
    let efa_module = state("efa")?;
    let peermem = state(efa::NV_PEERMEM_MODULE)?;
    let nv = DriverAndKernel::read(cx.host)?;
    let mut evidence = Vec::new();
    let peer_attribute = match efa::first_peer_attribute(cx.host, &functions)? {
        Some((path, a)) => {
            evidence.push(format!("{path} = {:?}", a.1));
            Some(a)
        }
        None => None,
    };
    let paths = Paths {
        amzn_driver: efa_module.version.clone(),
        peer_attribute,
        nv_peermem: peermem.is_loaded(),
        dmabuf: nv.open_module() && nv.kernel_at_least((5, 12)),
    };
    evidence.extend(efa_module.evidence());
    evidence.extend(peermem.evidence());
    evidence.extend(nv.evidence());
    let path = judge_path(&paths);
    if path.status != Status::Pass {
        let mut r = path;
        r.evidence.splice(0..0, evidence);
        return Ok(vec![r]);
    }
    let tree = PciTree::read(cx.host)?;
    let jobs = nearest_efas(&tree, &functions, &gpus);
    let registrations = match cx
        .answers
        .obtain(REGISTRATION_KEY, || efa_registration::register_each(&jobs))
    {
        Ok(o) => o.value,
        Err(e) => {
            return Ok(vec![
                CheckResult::error(ID, e).code(&common::LIBRARY_UNANSWERED)
            ])
        }
    };
    let mut out = vec![{
        let mut r = path;
        r.evidence.splice(0..0, evidence);
        r
    }];
    out.extend(registrations.iter().map(judge_registration));
    // A function the tree could not read may have moved which EFA is nearest.
    Ok(tree.completed(ID, crate::rules::topology::GPU_NIC_PATHS, out))
}

/// What the node offers for GPU memory on EFA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The efa module's version: only AWS's out-of-tree driver declares one.
    pub amzn_driver: Option<String>,
    /// `p2p` (provider name, empty = none) or `gdr` (`1`/`0`) on an EFA's PCI function.
    pub peer_attribute: Option<(String, String)>,
    pub nv_peermem: bool,
    /// Open NVIDIA kernel module on a kernel with DMA-BUF for RDMA.
    pub dmabuf: bool,
}

impl Paths {
    /// The peer path the amzn driver reports, in words; None when it reports none.
    fn peer(&self) -> Option<String> {
        efa::nvidia_peer_path(self.peer_attribute.as_ref(), self.nv_peermem)
    }
}

pub fn judge_path(p: &Paths) -> CheckResult {
    let driver = match &p.amzn_driver {
        Some(v) => format!("AWS out-of-tree efa {v}"),
        None => "in-tree efa".into(),
    };
    let mut found = Vec::new();
    if p.dmabuf {
        found.push("DMA-BUF (open NVIDIA module)".to_string());
    }
    found.extend(p.peer());
    if found.is_empty() {
        let attr = match &p.peer_attribute {
            Some((a, v)) => format!("{a} = {v:?}"),
            None => "no p2p/gdr attribute".into(),
        };
        return CheckResult::fail(
            ID,
            format!(
                "no GPUDirect RDMA path on EFA ({driver}): the NVIDIA module is not the open one (no DMA-BUF), \
                 {attr}, efa_nv_peermem not loaded; NCCL stages through host memory"
            ),
        )
        .fix(FIX).code(&NO_PATH);
    }
    CheckResult::pass(ID, format!("{driver}: {}", found.join(" and ")))
}

fn judge_registration(reg: &GpuRegistration) -> CheckResult {
    let subject = format!("GPU {} -> {}", reg.gpu, reg.device);
    match &reg.outcome {
        Ok(r) => {
            let mut c = CheckResult::pass(
                ID,
                format!(
                    "GPU memory registered on the EFA's protection domain through {}",
                    r.call
                ),
            )
            .subject(subject);
            for line in &r.refused {
                c = c.note(format!("refused first: {line}"));
            }
            c
        }
        Err(f) => CheckResult::fail(
            ID,
            format!(
                "GPU memory registration on the EFA failed at {}: {}",
                f.stage, f.message
            ),
        )
        .subject(subject)
        .fix(FIX)
        .code(&REGISTRATION_FAILED),
    }
}

/// Each GPU with the EFA RDMA device nearest it on PCIe (first in bus order on a tie).
fn nearest_efas(
    tree: &PciTree,
    functions: &[EfaFunction],
    gpus: &[nvidia::DriverGpu],
) -> Vec<(String, String)> {
    let efas: Vec<(&str, &str)> = functions
        .iter()
        .filter_map(|f| f.rdma_devices.first().map(|d| (f.bdf.as_str(), d.as_str())))
        .collect();
    gpus.iter()
        .filter_map(|g| {
            let bdf = g.bdf.to_ascii_lowercase();
            let distances: Vec<_> = efas
                .iter()
                .map(|(e, _)| {
                    tree.distance_between(&bdf, e)
                        .unwrap_or(crate::rules::topology::PcieDistance::SYS)
                })
                .collect();
            crate::rules::topology::nearest(&distances).map(|i| (bdf, efas[i].1.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(amzn: bool, attr: Option<(&str, &str)>, peermem: bool, dmabuf: bool) -> Paths {
        Paths {
            amzn_driver: amzn.then(|| "2.13.0g".to_string()),
            peer_attribute: attr.map(|(a, v)| (a.to_string(), v.to_string())),
            nv_peermem: peermem,
            dmabuf,
        }
    }

    #[test]
    fn each_path_is_named_and_none_fails() {
        let r = judge_path(&paths(false, None, false, true));
        assert_eq!(r.status, Status::Pass);
        assert!(r.summary.contains("in-tree efa: DMA-BUF"), "{}", r.summary);
        let r = judge_path(&paths(true, Some(("p2p", "NVIDIA peermem")), true, false));
        assert_eq!(r.status, Status::Pass);
        assert!(r.summary.contains("NVIDIA peermem"), "{}", r.summary);
        assert_eq!(
            judge_path(&paths(true, Some(("gdr", "1")), false, false)).status,
            Status::Pass
        );
        // The amzn driver found no GPU provider (`p2p` empty or Trainium's, `gdr` 0) and no DMA-BUF: no path.
        for attr in [
            Some(("p2p", "")),
            Some(("p2p", "NEURON")),
            Some(("gdr", "0")),
            None,
        ] {
            let r = judge_path(&paths(true, attr, false, false));
            assert_eq!(r.status, Status::Fail, "{attr:?}");
        }
        // The attribute is the driver's live answer: an empty provider beside a loaded efa_nv_peermem is none.
        let r = judge_path(&paths(true, Some(("p2p", "")), true, false));
        assert_eq!(r.status, Status::Fail);
        // Any NVIDIA provider name, as libfabric's efa provider reads it (prefix).
        let r = judge_path(&paths(true, Some(("p2p", "NVIDIA")), false, false));
        assert_eq!(r.status, Status::Pass);
        let r = judge_path(&paths(true, None, true, false));
        assert_eq!(r.status, Status::Pass);
    }
}
