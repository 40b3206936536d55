//! `gpu.inventory`: the GPUs NVML sees, against the profile: count, model, driver and CUDA version, persistence,
//! MIG, ECC, retired pages and remapped rows.

use crate::dynlib::nvml::{self, GpuFacts, NvmlFacts};
use crate::probe::{
    CheckResult, Context, Explain, Findings, Kind, Measurement, Need, Probe, ProbeMeta,
};
use crate::probe::{FindingCode, Library, Remedy};
use crate::probes::shared::facts::NVML;
use crate::probes::shared::gpu::{lost_fix, mark_replayed, obtain_nvml, shown, subject};
use crate::profile::Expect;
use crate::version::compare_versions;

pub struct GpuInventory;

const ID: &str = "gpu.inventory";

const COUNT_FAILED: FindingCode = FindingCode {
    code: "GPU001",
    title: "NVML cannot count the GPUs",
    explanation: "nvmlDeviceGetCount failed while NVML loaded: the driver is in a bad state (dmesg shows NVRM/Xid errors). Reset the GPUs or reboot.",
    step: Some(Remedy::ResetGpu),
};
const TOO_FEW: FindingCode = FindingCode {
    code: "GPU002",
    title: "NVML sees fewer GPUs than the profile expects",
    explanation: "A GPU is missing (fallen off the bus, or never enumerated): `dmesg | grep -i 'fallen off\\|Xid'`; reseat or RMA it.",
    step: Some(Remedy::ServiceRma),
};
const TOO_MANY: FindingCode = FindingCode {
    code: "GPU003",
    title: "NVML sees more GPUs than the profile expects",
    explanation: "More GPUs than `expect.gpu_count`: the profile is for another node type.",
    step: Some(Remedy::Reconfigure),
};
const DRIVER_TOO_OLD: FindingCode = FindingCode {
    code: "GPU004",
    title: "the driver NVML reports is older than the profile requires",
    explanation: "Upgrade the NVIDIA driver to the profile's `expect.driver_min_version` or later.",
    step: Some(Remedy::Reconfigure),
};
const DRIVER_VERSION_UNKNOWN: FindingCode = FindingCode {
    code: "GPU005",
    title: "the driver version is unknown while the profile requires a minimum",
    explanation:
        "NVML did not answer the driver version, so the profile's minimum cannot be checked.",
    step: Some(Remedy::Reconfigure),
};
const FELL_OFF: FindingCode = FindingCode {
    code: "GPU006",
    title: "a GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)",
    explanation: "NVML answers GPU_IS_LOST: the GPU no longer responds on PCIe. A reboot (or a bus reset) brings it back if it can; if it recurs, service the GPU.",
    step: Some(Remedy::Reboot),
};
const NVML_ERRORS: FindingCode = FindingCode {
    code: "GPU007",
    title: "NVML calls fail on a GPU",
    explanation: "NVML calls about this GPU fail (not lost, not denied): the driver or the GPU is in a bad state. Reset the GPU; check dmesg for Xid errors.",
    step: Some(Remedy::ResetGpu),
};
const WRONG_MODEL: FindingCode = FindingCode {
    code: "GPU008",
    title: "the GPU model is not the one the profile expects",
    explanation:
        "The profile names another model (`expect.gpu_model`): use the profile of this node type.",
    step: Some(Remedy::Reconfigure),
};
const PERSISTENCE_OFF: FindingCode = FindingCode {
    code: "GPU009",
    title: "persistence mode is off",
    explanation: "Each job pays the driver's initialisation and GPU state is lost between jobs: `nvidia-smi -pm 1` or enable nvidia-persistenced.",
    step: Some(Remedy::Reconfigure),
};
const MIG_ENABLED: FindingCode = FindingCode {
    code: "GPU010",
    title: "MIG is enabled",
    explanation: "Whole-GPU jobs, P2P and GPUDirect see MIG slices: `nvidia-smi -i <gpu> -mig 0` and reset the GPU, unless the node is meant to be partitioned.",
    step: Some(Remedy::ResetGpu),
};
const ECC_DISABLED: FindingCode = FindingCode {
    code: "GPU011",
    title: "ECC is disabled",
    explanation: "Memory errors go undetected: `nvidia-smi -i <gpu> -e 1` and reboot.",
    step: Some(Remedy::Reboot),
};
const ECC_UNCORRECTED: FindingCode = FindingCode {
    code: "GPU012",
    title: "uncorrected ECC errors since the driver loaded",
    explanation: "Uncorrected memory errors corrupt data: drain the node and check `nvidia-smi -q -d ECC`; repeated errors mean RMA.",
    step: Some(Remedy::ServiceRma),
};
const RETIRED_PENDING: FindingCode = FindingCode {
    code: "GPU013",
    title: "retired pages are pending until the next GPU reset",
    explanation: "Pages with errors are retired only at the next GPU reset: reset it (`nvidia-smi -r -i <gpu>`).",
    step: Some(Remedy::ResetGpu),
};
const REMAP_FAILED: FindingCode = FindingCode {
    code: "GPU014",
    title: "row remapping failed: the GPU needs service",
    explanation:
        "The GPU ran out of spare rows for its memory errors: drain the node and RMA the GPU.",
    step: Some(Remedy::ServiceRma),
};
const REMAP_PENDING: FindingCode = FindingCode {
    code: "GPU015",
    title: "row remapping is pending until the next GPU reset",
    explanation: "Rows with errors are remapped only at the next GPU reset: reset it (`nvidia-smi -r -i <gpu>`).",
    step: Some(Remedy::ResetGpu),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "GPUs through NVML: count, model, driver/CUDA version, persistence, MIG, ECC, retired pages, remapped rows",
    needs: &[Need::Gpu],
    kind: Kind::Library,
    libraries: &[Library::Nvml],
    facts: &[&NVML],
    explain: Explain {
        reads: "NVML (libnvidia-ml.so.1, opened at run time): nvmlSystemGetDriverVersion, \
                nvmlSystemGetCudaDriverVersion_v2, nvmlDeviceGetCount_v2, and per GPU name, UUID, PCI info, \
                persistence mode, MIG mode, ECC mode, volatile uncorrected ECC errors, retired pages (pre-Ampere), \
                remapped rows (Ampere and later)",
        why: "A node that lost a GPU, runs an older driver than the fleet, left MIG on, or has a GPU with a failed \
              row remapping looks healthy to the scheduler, and the job that lands on it fails or runs short.",
        fixes: &[
            ("fewer GPUs than the profile expects", "`dmesg | grep -i 'fallen off\\|Xid'`; reseat or RMA the GPU"),
            ("driver older than expect.driver_min_version", "upgrade the NVIDIA driver package"),
            ("model differs from expect.gpu_model", "use the profile of this node type, or fix the node inventory"),
            ("persistence mode off", "`nvidia-smi -pm 1` or enable nvidia-persistenced"),
            ("MIG enabled", "`nvidia-smi -i <gpu> -mig 0` and reset the GPU, unless the node is meant to be partitioned"),
            ("row remapping failed or pending / pages pending retirement", "reset the GPU (`nvidia-smi -r -i <gpu>`); a failed remapping means RMA"),
        ],
    },
    findings: &[
        &COUNT_FAILED,
        &TOO_FEW,
        &TOO_MANY,
        &DRIVER_TOO_OLD,
        &DRIVER_VERSION_UNKNOWN,
        &FELL_OFF,
        &NVML_ERRORS,
        &WRONG_MODEL,
        &PERSISTENCE_OFF,
        &MIG_ENABLED,
        &ECC_DISABLED,
        &ECC_UNCORRECTED,
        &RETIRED_PENDING,
        &REMAP_FAILED,
        &REMAP_PENDING,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GpuInventory {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let obtained = match obtain_nvml(cx, ID) {
            Ok(o) => o,
            Err(r) => return vec![*r],
        };
        let expect = &cx.profile.expect;
        let mut results = vec![judge_node(&obtained.value, expect, obtained.replayed)];
        for g in &obtained.value.gpus {
            results.push(mark_replayed(judge_gpu(g, expect), obtained.replayed));
        }
        results
    }
}

/// The node: how many GPUs, which driver, which CUDA.
pub fn judge_node(facts: &NvmlFacts, expect: &Expect, replayed: bool) -> CheckResult {
    let mut f = Findings::default();
    let count = facts.gpus.len() as u32;
    if let Err(e) = &facts.device_count {
        f.coded(&COUNT_FAILED).fail(
            format!("NVML cannot count GPUs: {e}"),
            "check `dmesg` for NVRM/Xid errors",
        );
    }
    if let Some(want) = expect.gpu_count {
        if count < want {
            f.coded(&TOO_FEW).fail(
                format!("NVML sees {count} GPU(s), profile expects {want}"),
                "a GPU is missing: `dmesg | grep -i 'fallen off\\|Xid'`; reseat or RMA it",
            );
        } else if count > want {
            f.coded(&TOO_MANY).warn(
                format!("NVML sees {count} GPU(s), profile expects {want}"),
                "use the profile of this node type",
            );
        }
    }
    match (&facts.driver_version, &expect.driver_min_version) {
        (Ok(v), Some(min)) if compare_versions(v, min).is_lt() => {
            f.coded(&DRIVER_TOO_OLD).fail(
                format!("driver {v} older than required {min}"),
                format!("upgrade the NVIDIA driver to {min} or later"),
            );
        }
        (Err(e), Some(min)) => {
            f.coded(&DRIVER_VERSION_UNKNOWN).fail(
                format!("driver version unknown ({e}), profile requires {min}"),
                "",
            );
        }
        _ => {}
    }
    let cuda = facts
        .cuda_driver_version
        .as_ref()
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
        .unwrap_or_else(|_| "?".into());
    let summary = format!(
        "{count} GPU(s), driver {}, CUDA {cuda}",
        facts.driver_version.as_deref().unwrap_or("?")
    );
    let r = f
        .result(ID, summary)
        .evidence("nvmlSystemGetDriverVersion", shown(&facts.driver_version))
        .evidence(
            "nvmlSystemGetCudaDriverVersion_v2",
            shown(&facts.cuda_driver_version),
        )
        .evidence("nvmlSystemGetNVMLVersion", shown(&facts.nvml_version))
        .evidence("nvmlDeviceGetCount_v2", shown(&facts.device_count))
        .measure(Measurement::new("gpu_count", count as f64, "GPUs").replayed(replayed));
    mark_replayed(r, replayed)
}

/// NVML's per-GPU errors, judged: a GPU that answers a call with an error is not healthy, whatever the other
/// calls said. A call the GPU or driver does not support, or one not asked, judges nothing.
fn judge_answers(g: &GpuFacts, f: &mut Findings) {
    let answers = [
        g.name.as_ref().err(),
        g.uuid.as_ref().err(),
        g.pci_bus_id.as_ref().err(),
        g.persistence.as_ref().err(),
        g.mig_enabled.as_ref().err(),
        g.ecc_enabled.as_ref().err(),
        g.ecc_uncorrected_volatile.as_ref().err(),
        g.retired_pages_sbe.as_ref().err(),
        g.retired_pages_dbe.as_ref().err(),
        g.retired_pages_pending.as_ref().err(),
        g.remapped_rows.as_ref().err(),
    ];
    let (mut lost, mut failed, mut denied) = (Vec::new(), Vec::new(), Vec::new());
    for e in answers.into_iter().flatten() {
        match nvml::fault(e) {
            nvml::Fault::Unsupported | nvml::Fault::NotAsked => {}
            nvml::Fault::Lost => lost.push(e.as_str()),
            nvml::Fault::Denied => denied.push(e.as_str()),
            nvml::Fault::Failed => failed.push(e.as_str()),
        }
    }
    if let Some(first) = lost.first() {
        f.coded(&FELL_OFF).fail(
            format!(
                "GPU {} fell off the bus: NVML answers {} call(s) with NVML_ERROR_GPU_IS_LOST ({first})",
                g.index,
                lost.len()
            ),
            lost_fix(g.index),
        );
    }
    if !failed.is_empty() {
        f.coded(&NVML_ERRORS).fail(
            format!("NVML errors on GPU {}: {}", g.index, failed.join("; ")),
            lost_fix(g.index),
        );
    }
    for e in denied {
        f.unread("an NVML answer", e);
    }
}

/// One GPU: identity, modes and memory health.
pub fn judge_gpu(g: &GpuFacts, expect: &Expect) -> CheckResult {
    let mut f = Findings::default();
    judge_answers(g, &mut f);
    let label = g
        .name
        .clone()
        .unwrap_or_else(|_| format!("GPU {}", g.index));
    if let (Some(model), Ok(name)) = (&expect.gpu_model, &g.name) {
        if !name.contains(model.as_str()) {
            f.coded(&WRONG_MODEL).fail(
                format!("model {name} is not the expected {model}"),
                "use the profile of this node type",
            );
        }
    }
    if g.persistence == Ok(false) {
        f.coded(&PERSISTENCE_OFF).warn(
            "persistence mode off (each job pays driver initialisation; state is lost between jobs)",
            "`nvidia-smi -pm 1` or enable nvidia-persistenced",
        );
    }
    if g.mig_enabled == Ok(true) {
        f.coded(&MIG_ENABLED).warn(
            "MIG enabled: whole-GPU jobs, P2P and GPUDirect see slices",
            "`nvidia-smi -i <gpu> -mig 0` and reset the GPU, unless the node is meant to be partitioned",
        );
    }
    if g.ecc_enabled == Ok(false) {
        f.coded(&ECC_DISABLED)
            .warn("ECC disabled", "`nvidia-smi -i <gpu> -e 1` and reboot");
    }
    if let Ok(n @ 1..) = g.ecc_uncorrected_volatile {
        f.coded(&ECC_UNCORRECTED).warn(
            format!("{n} uncorrected ECC error(s) since the driver loaded"),
            "drain the node and check `nvidia-smi -q -d ECC`; repeated errors mean RMA",
        );
    }
    if g.retired_pages_pending == Ok(true) {
        f.coded(&RETIRED_PENDING).fail(
            "retired pages pending (take effect at the next GPU reset)",
            "reset the GPU: `nvidia-smi -r -i <gpu>`",
        );
    }
    if let Ok(rows) = &g.remapped_rows {
        if rows.failure {
            f.coded(&REMAP_FAILED).fail(
                "row remapping failed: the GPU needs service",
                "drain the node and RMA the GPU",
            );
        } else if rows.pending {
            f.coded(&REMAP_PENDING).fail(
                "row remapping pending (takes effect at the next GPU reset)",
                "reset the GPU: `nvidia-smi -r -i <gpu>`",
            );
        }
    }
    // Only what NVML answered: a mode it did not give is in the evidence, never a `?` here.
    let modes: Vec<String> = [
        ("persistence", &g.persistence),
        ("MIG", &g.mig_enabled),
        ("ECC", &g.ecc_enabled),
    ]
    .into_iter()
    .filter_map(|(what, a)| {
        a.as_ref()
            .ok()
            .map(|on| format!("{what} {}", if *on { "on" } else { "off" }))
    })
    .collect();
    let summary = if modes.is_empty() {
        label
    } else {
        format!("{label}, {}", modes.join(", "))
    };
    let mut r = f
        .result(ID, summary)
        .subject(subject(g))
        .evidence("nvmlDeviceGetName", shown(&g.name))
        .evidence("nvmlDeviceGetUUID", shown(&g.uuid))
        .evidence("nvmlDeviceGetPciInfo_v3.busId", shown(&g.pci_bus_id))
        .evidence("nvmlDeviceGetPersistenceMode", shown(&g.persistence))
        .evidence("nvmlDeviceGetMigMode.current", shown(&g.mig_enabled))
        .evidence("nvmlDeviceGetEccMode.current", shown(&g.ecc_enabled))
        .evidence(
            "nvmlDeviceGetTotalEccErrors(uncorrected, volatile)",
            shown(&g.ecc_uncorrected_volatile),
        );
    match &g.remapped_rows {
        Ok(rows) => {
            r = r.evidence(
                "nvmlDeviceGetRemappedRows",
                format!(
                    "correctable {}, uncorrectable {}, pending {}, failure {}",
                    rows.correctable, rows.uncorrectable, rows.pending, rows.failure
                ),
            )
        }
        Err(e) => r = r.evidence("nvmlDeviceGetRemappedRows", format!("<{e}>")),
    }
    // Page retirement is the pre-Ampere mechanism: shown only where the driver answers it.
    if g.retired_pages_sbe.is_ok() || g.retired_pages_dbe.is_ok() {
        r = r
            .evidence(
                "nvmlDeviceGetRetiredPages(SBE)",
                shown(&g.retired_pages_sbe),
            )
            .evidence(
                "nvmlDeviceGetRetiredPages(DBE)",
                shown(&g.retired_pages_dbe),
            )
            .evidence(
                "nvmlDeviceGetRetiredPagesPendingStatus",
                shown(&g.retired_pages_pending),
            );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynlib::nvml::RemappedRows;
    use crate::probe::Status;

    fn h200(index: u32) -> GpuFacts {
        GpuFacts {
            index,
            name: Ok("NVIDIA H200".into()),
            uuid: Ok(format!("GPU-{index}")),
            pci_bus_id: Ok(format!("0000:{:02x}:00.0", 0x18 + index)),
            persistence: Ok(true),
            mig_enabled: Ok(false),
            ecc_enabled: Ok(true),
            ecc_uncorrected_volatile: Ok(0),
            remapped_rows: Ok(RemappedRows {
                correctable: 0,
                uncorrectable: 0,
                pending: false,
                failure: false,
            }),
            ..GpuFacts::default()
        }
    }

    fn node(n: u32) -> NvmlFacts {
        NvmlFacts {
            nvml_error: None,
            driver_version: Ok("580.159.04".into()),
            cuda_driver_version: Ok(13000),
            nvml_version: Ok("13.580.159.04".into()),
            device_count: Ok(n),
            gpus: (0..n).map(h200).collect(),
            pairs: vec![],
        }
    }

    #[test]
    fn node_with_expected_count_and_driver_passes() {
        let expect = Expect {
            gpu_count: Some(8),
            driver_min_version: Some("535.104.05".into()),
            ..Expect::default()
        };
        let r = judge_node(&node(8), &expect, false);
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert_eq!(r.summary, "8 GPU(s), driver 580.159.04, CUDA 13.0");
    }

    #[test]
    fn node_missing_gpu_fails() {
        let expect = Expect {
            gpu_count: Some(8),
            ..Expect::default()
        };
        let r = judge_node(&node(7), &expect, false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("NVML sees 7 GPU(s), profile expects 8"));
    }

    #[test]
    fn node_old_driver_fails() {
        let expect = Expect {
            driver_min_version: Some("590.1".into()),
            ..Expect::default()
        };
        let r = judge_node(&node(1), &expect, false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("older than required 590.1"));
    }

    #[test]
    fn node_replayed_is_marked() {
        let r = judge_node(&node(1), &Expect::default(), true);
        assert!(r.measurements[0].replayed);
        assert!(r
            .evidence
            .iter()
            .any(|e| e.contains("replayed from recording")));
    }

    #[test]
    fn gpu_healthy_h200_passes() {
        let expect = Expect {
            gpu_model: Some("H200".into()),
            ..Expect::default()
        };
        let r = judge_gpu(&h200(0), &expect);
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert_eq!(r.subject.as_deref(), Some("0000:18:00.0"));
    }

    #[test]
    fn gpu_wrong_model_fails() {
        let expect = Expect {
            gpu_model: Some("H100".into()),
            ..Expect::default()
        };
        assert_eq!(judge_gpu(&h200(0), &expect).status, Status::Fail);
    }

    #[test]
    fn gpu_mig_and_persistence_off_warn() {
        let mut g = h200(0);
        g.mig_enabled = Ok(true);
        g.persistence = Ok(false);
        let r = judge_gpu(&g, &Expect::default());
        assert_eq!(r.status, Status::Warn);
        assert!(r.summary.contains("MIG enabled") && r.summary.contains("persistence mode off"));
    }

    #[test]
    fn gpu_failed_row_remapping_fails() {
        let mut g = h200(0);
        g.remapped_rows = Ok(RemappedRows {
            correctable: 0,
            uncorrectable: 3,
            pending: false,
            failure: true,
        });
        let r = judge_gpu(&g, &Expect::default());
        assert_eq!(r.status, Status::Fail);
        assert!(r.remediation.unwrap().contains("RMA"));
    }

    #[test]
    fn gpu_unanswered_calls_are_evidence_not_failures() {
        let g = GpuFacts {
            index: 3,
            name: Ok("NVIDIA H200".into()),
            ..GpuFacts::default()
        };
        let r = judge_gpu(&g, &Expect::default());
        assert_eq!(r.status, Status::Pass);
        assert_eq!(r.subject.as_deref(), Some("GPU 3"));
        assert!(r
            .evidence
            .iter()
            .any(|e| e == "nvmlDeviceGetUUID = <not read>"));
    }
}
