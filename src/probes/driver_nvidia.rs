//! `driver.nvidia`: the NVIDIA kernel driver is loaded, which flavour, which version, which GPUs it sees.

use crate::host::ReadError;
use crate::presence::{Stack, Survey};
use crate::probe::{CheckResult, Context, Explain, Need, Probe, ProbeMeta};
use crate::sysfs::modules::Modules;
use crate::sysfs::nvidia::{self, NVIDIA_GPUS, NVIDIA_VERSION};
use crate::sysfs::stable;
use crate::version::compare_versions;

pub struct DriverNvidia;

const ID: &str = "driver.nvidia";

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "NVIDIA kernel driver loaded, open vs proprietary module, version, GPUs it lists",
    needs: &[Need::Gpu],
    explain: Explain {
        reads: "/proc/modules and /sys/module/nvidia{,_uvm} (loaded, built in, version), /proc/driver/nvidia/version \
                (version and module flavour), /proc/driver/nvidia/gpus/<bdf>/information (model, UUID, excluded)",
        why: "Every GPU data path starts at the kernel driver. The open kernel module is required for DMA-BUF \
              GPUDirect RDMA and for GDS over PCI P2PDMA; an excluded GPU or a driver older than the fleet's \
              minimum silently changes what jobs get.",
        fixes: &[
            ("nvidia module not loaded", "install the driver and `modprobe nvidia nvidia_uvm`; check `dmesg | grep -i nvrm`"),
            ("driver older than the profile minimum", "upgrade the driver package to at least expect.driver_min_version"),
            ("GPU excluded by the driver", "see `dmesg` for the Xid that excluded it; reset or replace the GPU"),
            ("fewer GPUs than expected", "a GPU fell off the bus: `dmesg | grep -i 'fallen off'`, reseat or RMA"),
        ],
    },
    ..ProbeMeta::STATIC
};

impl Probe for DriverNvidia {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        // A host file that could not be read ends the check with the error naming it.
        judge(cx).unwrap_or_else(|e| vec![CheckResult::read_error(ID, &e)])
    }
}

fn judge(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let modules = Modules::read(cx.host)?;
    let nvidia = modules.state(cx.host, "nvidia")?;
    let uvm = modules.state(cx.host, "nvidia_uvm")?;
    let version_text = stable::read(cx.host, NVIDIA_VERSION);
    let expects_gpus = cx.profile.expect.gpu_count.is_some_and(|n| n > 0);

    let survey = Survey::read(cx.host, Stack::Gpu);
    if !nvidia.is_loaded() && version_text.as_ref().is_err_and(|e| e.is_not_found()) {
        let r = survey.gate(ID, expects_gpus).unwrap_or_else(|| {
            CheckResult::fail(ID, "NVIDIA kernel driver not loaded, yet it lists GPUs")
        });
        return Ok(vec![r.evidence(NVIDIA_VERSION, "<missing>").fix(
            "install the NVIDIA driver and load it: `modprobe nvidia nvidia_uvm`",
        )]);
    }

    let version = version_text.map(|text| nvidia::parse_version(&text).ok_or(text))?;
    let gpus = nvidia::read_driver_gpus(cx.host)?;

    let mut problems: Vec<(bool, String)> = Vec::new(); // (is_failure, text)
    let mut fixes = Vec::new();
    let mut evidence: Vec<String> = Vec::new();
    for m in [&nvidia, &uvm] {
        evidence.extend(m.evidence());
    }
    if !nvidia.is_loaded() {
        problems.push((true, "nvidia module not Live".into()));
        fixes.push("`modprobe nvidia`; check `dmesg | grep -i nvrm`".to_string());
    }
    if !uvm.is_loaded() {
        problems.push((true, "nvidia_uvm not loaded (CUDA cannot start)".into()));
        fixes.push("`modprobe nvidia_uvm`".to_string());
    }
    let summary_version = match &version {
        Ok(v) => {
            evidence.push(format!("{NVIDIA_VERSION} = {}", v.nvrm_line));
            if let Some(sys) = &nvidia.version {
                if sys != &v.version {
                    problems.push((
                        false,
                        format!(
                            "/sys/module/nvidia/version {sys} differs from procfs {}",
                            v.version
                        ),
                    ));
                }
            }
            if let Some(min) = &cx.profile.expect.driver_min_version {
                if compare_versions(&v.version, min).is_lt() {
                    problems.push((
                        true,
                        format!("driver {} older than required {min}", v.version),
                    ));
                    fixes.push(format!("upgrade the NVIDIA driver to {min} or later"));
                }
            }
            format!(
                "driver {} ({} kernel module)",
                v.version,
                v.flavour.as_str()
            )
        }
        Err(text) => {
            evidence.push(format!(
                "{NVIDIA_VERSION} = {}",
                text.lines().next().unwrap_or("")
            ));
            problems.push((true, "unrecognised /proc/driver/nvidia/version".into()));
            "driver version unknown".into()
        }
    };
    if !survey.unbound.is_empty() {
        problems.push((
            true,
            format!(
                "GPU(s) on the PCI bus that the driver has not taken: {}",
                survey.unbound.join(", ")
            ),
        ));
        fixes.push(
                "see `dmesg | grep -i nvrm` for why the driver did not take them (unsupported GPU, vfio-pci binding, a GPU that failed to initialise)"
                    .into(),
            );
    }
    for g in &gpus {
        evidence.push(format!(
            "{NVIDIA_GPUS}/{}/information = {}, {}{}",
            g.bdf,
            g.model.as_deref().unwrap_or("?"),
            g.uuid.as_deref().unwrap_or("?"),
            if g.excluded {
                ", GPU Excluded: Yes"
            } else {
                ""
            }
        ));
        if g.excluded {
            problems.push((true, format!("GPU {} excluded by the driver", g.bdf)));
            fixes.push(
                "check `dmesg` for the Xid that excluded the GPU; reset or replace it".into(),
            );
        }
    }
    if let Some(want) = cx.profile.expect.gpu_count {
        if (gpus.len() as u32) < want {
            problems.push((
                true,
                format!("driver lists {} GPUs, profile expects {want}", gpus.len()),
            ));
            fixes.push(
                "a GPU is missing from the driver: `dmesg | grep -i 'fallen off\\|NVRM'`".into(),
            );
        }
    }

    let summary = format!("{summary_version}, {} GPU(s)", gpus.len());
    let mut r = if problems.iter().any(|(fail, _)| *fail) {
        CheckResult::fail(ID, format!("{summary}: {}", join_problems(&problems)))
    } else if !problems.is_empty() {
        CheckResult::warn(ID, format!("{summary}: {}", join_problems(&problems)))
    } else {
        CheckResult::pass(ID, summary)
    };
    r.evidence = evidence;
    r = r.measure(crate::probe::Measurement::new(
        "gpu_count",
        gpus.len() as f64,
        "GPUs",
    ));
    if !fixes.is_empty() {
        r = r.fix(fixes.join("; "));
    }
    Ok(survey.completed(ID, vec![r]))
}

fn join_problems(problems: &[(bool, String)]) -> String {
    problems
        .iter()
        .map(|(_, p)| p.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}
