//! `driver.nvidia`: the NVIDIA kernel driver is loaded, which flavour, which version, which GPUs it sees.

use crate::host::{Host, ReadError};
use crate::probe::{
    CheckResult, Context, Explain, FindingCode, Findings, Need, Probe, ProbeMeta, Remedy,
};
use crate::profile::Expect;
use crate::rules::presence::{Stack, Survey};
use crate::sysfs::modules::{ModuleState, Modules};
use crate::sysfs::nvidia::{self, DriverGpu, DriverVersion, NVIDIA_GPUS, NVIDIA_VERSION};
use crate::sysfs::stable;
use crate::version::compare_versions;

pub struct DriverNvidia;

const ID: &str = "driver.nvidia";

const NOT_LOADED: FindingCode = FindingCode {
    code: "DRV001",
    title: "the NVIDIA kernel driver is not loaded, yet GPUs are listed",
    explanation: "/proc/driver/nvidia/version is missing while the driver lists GPUs: a driver half loaded or unloaded under its users. Install and load it: `modprobe nvidia nvidia_uvm`.",
    step: Some(Remedy::LoadModule),
};
const NOT_LIVE: FindingCode = FindingCode {
    code: "DRV002",
    title: "the nvidia module is not Live",
    explanation: "/proc/modules shows the nvidia module loading, unloading or failed: `modprobe nvidia`; `dmesg | grep -i nvrm` says why.",
    step: Some(Remedy::LoadModule),
};
const NO_UVM: FindingCode = FindingCode {
    code: "DRV003",
    title: "nvidia_uvm is not loaded: CUDA cannot start",
    explanation: "CUDA needs the unified memory module: `modprobe nvidia_uvm` (nvidia-persistenced or nvidia-modprobe load it at boot).",
    step: Some(Remedy::LoadModule),
};
const VERSION_MISMATCH: FindingCode = FindingCode {
    code: "DRV004",
    title: "the loaded module's version differs from the driver's procfs version",
    explanation: "/sys/module/nvidia/version and /proc/driver/nvidia/version disagree: a driver upgraded without a reboot, whose user-space libraries no longer match the module. Reboot.",
    step: Some(Remedy::Reboot),
};
const TOO_OLD: FindingCode = FindingCode {
    code: "DRV005",
    title: "the driver is older than the profile requires",
    explanation:
        "The loaded driver's version is below `expect.driver_min`: upgrade the NVIDIA driver.",
    step: Some(Remedy::Reconfigure),
};
const VERSION_UNRECOGNISED: FindingCode = FindingCode {
    code: "DRV006",
    title: "/proc/driver/nvidia/version is not recognised",
    explanation: "The driver's version file does not read as an NVIDIA driver's: its flavour and version are unknown.",
    step: None,
};
const GPUS_NOT_TAKEN: FindingCode = FindingCode {
    code: "DRV007",
    title: "GPUs on the PCI bus that the driver has not taken",
    explanation: "The driver lists fewer GPUs than the bus holds: an unsupported GPU, a vfio-pci binding, or a GPU that failed to initialise (`dmesg | grep -i nvrm`). Reset it; replace it if it fails again.",
    step: Some(Remedy::ResetGpu),
};
const GPU_EXCLUDED: FindingCode = FindingCode {
    code: "DRV008",
    title: "a GPU is excluded by the driver",
    explanation: "The driver marked the GPU excluded after an Xid: reset it (`nvidia-smi -r`), replace it if it recurs.",
    step: Some(Remedy::ResetGpu),
};
const TOO_FEW_GPUS: FindingCode = FindingCode {
    code: "DRV009",
    title: "the driver lists fewer GPUs than the profile expects",
    explanation: "A GPU is missing from the driver (fallen off the bus, or never enumerated): `dmesg | grep -i 'fallen off\\|NVRM'`.",
    step: Some(Remedy::ServiceRma),
};

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
    findings: &[
        &NOT_LOADED,
        &NOT_LIVE,
        &NO_UVM,
        &VERSION_MISMATCH,
        &TOO_OLD,
        &VERSION_UNRECOGNISED,
        &GPUS_NOT_TAKEN,
        &GPU_EXCLUDED,
        &TOO_FEW_GPUS,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for DriverNvidia {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        // A host file that could not be read ends the check with the error naming it.
        CheckResult::or_read_error(
            ID,
            Facts::read(cx.host).map(|facts| judge(&facts, &cx.profile.expect)),
        )
    }
}

/// What the check reads, before it judges.
struct Facts {
    nvidia: ModuleState,
    uvm: ModuleState,
    survey: Survey,
    /// What the driver says of itself; not read when neither its module nor its procfs version is there.
    driver: Option<Driver>,
}

struct Driver {
    /// The parsed version file, or its text when it is not one the driver writes.
    version: Result<DriverVersion, String>,
    gpus: Vec<DriverGpu>,
}

impl Facts {
    fn read(host: &Host) -> Result<Facts, ReadError> {
        let modules = Modules::read(host)?;
        let nvidia = modules.state(host, "nvidia")?;
        let uvm = modules.state(host, "nvidia_uvm")?;
        let version_text = stable::read(host, NVIDIA_VERSION);
        let survey = Survey::read(host, Stack::Gpu);
        let driver =
            if !nvidia.is_loaded() && version_text.as_ref().is_err_and(|e| e.is_not_found()) {
                None
            } else {
                let version = version_text.map(|text| nvidia::parse_version(&text).ok_or(text))?;
                let gpus = nvidia::read_driver_gpus(host)?;
                Some(Driver { version, gpus })
            };
        Ok(Facts {
            nvidia,
            uvm,
            survey,
            driver,
        })
    }
}

fn judge(facts: &Facts, expect: &Expect) -> Vec<CheckResult> {
    let Facts {
        nvidia,
        uvm,
        survey,
        driver,
    } = facts;
    let expects_gpus = expect.gpu_count.is_some_and(|n| n > 0);
    let Some(Driver { version, gpus }) = driver else {
        let r = survey.gate(ID, expects_gpus).unwrap_or_else(|| {
            CheckResult::fail(ID, "NVIDIA kernel driver not loaded, yet it lists GPUs")
                .code(&NOT_LOADED)
        });
        return vec![r
            .evidence(NVIDIA_VERSION, "<missing>")
            .fix("install the NVIDIA driver and load it: `modprobe nvidia nvidia_uvm`")];
    };

    let mut f = Findings::default();
    let mut evidence: Vec<String> = Vec::new();
    for m in [nvidia, uvm] {
        evidence.extend(m.evidence());
    }
    if !nvidia.is_loaded() {
        f.coded(&NOT_LIVE).fail(
            "nvidia module not Live",
            "`modprobe nvidia`; check `dmesg | grep -i nvrm`",
        );
    }
    if !uvm.is_loaded() {
        f.coded(&NO_UVM).fail(
            "nvidia_uvm not loaded (CUDA cannot start)",
            "`modprobe nvidia_uvm`",
        );
    }
    let summary_version = match version {
        Ok(v) => {
            evidence.push(format!("{NVIDIA_VERSION} = {}", v.nvrm_line));
            if let Some(sys) = &nvidia.version {
                if sys != &v.version {
                    f.coded(&VERSION_MISMATCH).warn(
                        format!(
                            "/sys/module/nvidia/version {sys} differs from procfs {}",
                            v.version
                        ),
                        "",
                    );
                }
            }
            if let Some(min) = &expect.driver_min_version {
                if compare_versions(&v.version, min).is_lt() {
                    f.coded(&TOO_OLD).fail(
                        format!("driver {} older than required {min}", v.version),
                        format!("upgrade the NVIDIA driver to {min} or later"),
                    );
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
            f.coded(&VERSION_UNRECOGNISED)
                .fail("unrecognised /proc/driver/nvidia/version", "");
            "driver version unknown".into()
        }
    };
    if !survey.unbound.is_empty() {
        f.coded(&GPUS_NOT_TAKEN).fail(
            format!(
                "GPU(s) on the PCI bus that the driver has not taken: {}",
                survey.unbound.join(", ")
            ),
            "see `dmesg | grep -i nvrm` for why the driver did not take them (unsupported GPU, vfio-pci binding, a GPU that failed to initialise)",
        );
    }
    for g in gpus {
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
            f.coded(&GPU_EXCLUDED).fail(
                format!("GPU {} excluded by the driver", g.bdf),
                "check `dmesg` for the Xid that excluded the GPU; reset or replace it",
            );
        }
    }
    if let Some(want) = expect.gpu_count {
        if (gpus.len() as u32) < want {
            f.coded(&TOO_FEW_GPUS).fail(
                format!("driver lists {} GPUs, profile expects {want}", gpus.len()),
                "a GPU is missing from the driver: `dmesg | grep -i 'fallen off\\|NVRM'`",
            );
        }
    }

    let summary = format!("{summary_version}, {} GPU(s)", gpus.len());
    let mut r = f.result(ID, summary);
    r.evidence = evidence;
    r = r.measure(crate::probe::Measurement::new(
        "gpu_count",
        gpus.len() as f64,
        "GPUs",
    ));
    survey.completed(ID, vec![r])
}
