//! `gds.kernel_path`: the GPUDirect Storage kernel driver (nvidia_fs) is loaded, or cuFile's PCI P2PDMA path,
//! which needs none, is ready (`gds_p2pdma`, as gds.config reads it).

use crate::host::{optional, Host, ReadError};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Need, Probe, ProbeMeta, Remedy,
};
use crate::rules::gds_p2pdma::P2pdma;
use crate::rules::presence::{Stack, Survey};
use crate::sysfs::cufile_json::{self, ConfigError, CufileConfig};
use crate::sysfs::modules::{ModuleState, Modules};
use crate::sysfs::nvfs::{self, NVFS_DEVCOUNT, NVFS_STATS, NVFS_VERSION};
use crate::sysfs::nvidia::{self, DriverGpu};
use crate::sysfs::stable;

pub struct GdsKernelPath;

const ID: &str = "gds.kernel_path";

const FIX: &str = "install the GDS kernel driver (`nvidia-fs-dkms` or the `nvidia-gds` package matching the driver) and \
`modprobe nvidia_fs`; or, on an open kernel module with CONFIG_PCI_P2PDMA, set `\"use_pci_p2pdma\": true` in /etc/cufile.json";

const STATS_ERRORS: FindingCode = FindingCode {
    code: "GDS001",
    title: "nvidia_fs is loaded but its stats count errors",
    explanation: "The `Error` row of /proc/driver/nvidia-fs/stats is not all zero: GDS operations failed since the \
        module loaded. The evidence quotes the row; dmesg names the failing operation.",
    step: Some(Remedy::Reconfigure),
};
const GDS_REQUIRED: FindingCode = FindingCode {
    code: "GDS002",
    title: "no GPUDirect Storage path (nvidia_fs not loaded, no PCI P2PDMA) and the profile requires GDS",
    explanation: "cuFile can only run in compatibility mode: reads bounce through host memory. The profile \
        requires GDS (`expect.gds`). Install and load nvidia-fs matching the driver, or configure PCI P2PDMA.",
    step: Some(Remedy::LoadModule),
};
const GDS_NOT_EXPECTED: FindingCode = FindingCode {
    code: "GDS003",
    title: "nvidia_fs not loaded and the profile does not expect GPUDirect Storage",
    explanation: "A skip: the profile says GDS is not used here (`expect.gds: false`).",
    step: None,
};
const COMPAT_ONLY: FindingCode = FindingCode {
    code: "GDS004",
    title: "no GPUDirect Storage path: cuFile can only run in compatibility mode",
    explanation: "GPUs are here but nvidia_fs is not loaded and PCI P2PDMA is not configured (or the host lacks \
        what it needs, named in the summary): storage reads bounce through host memory. A warning unless the \
        profile requires GDS (GDS002).",
    step: Some(Remedy::LoadModule),
};
const STATS_UNRECOGNISED: FindingCode = FindingCode {
    code: "GDS005",
    title: "/proc/driver/nvidia-fs/stats is not nvidia-fs's output (no Error row)",
    explanation: "nvidia-fs always prints its `Error` row: a stats file without one is not its output, so whether \
        GDS operations failed is unknown.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "GPUDirect Storage direct path: nvidia_fs loaded, or PCI P2PDMA ready (else cuFile runs in compat mode)",
    needs: &[Need::Gpu, Need::NvidiaFs],
    explain: Explain {
        reads: "/proc/modules, /sys/module/nvidia_fs, /proc/driver/nvidia-fs/{version,devcount,stats}; without \
                nvidia_fs, the PCI P2PDMA path as gds.config reads it (cufile.json use_pci_p2pdma, \
                /proc/driver/nvidia/version, /boot/config-<release>, /sys/module/nvme)",
        why: "Without nvidia_fs, cuFile silently runs in compatibility mode: every read bounces through host \
              memory with POSIX I/O, and tools such as gdsio still label the run GPU-direct. Storage-bound jobs \
              lose the bandwidth GDS was bought for.",
        fixes: &[
            ("nvidia_fs not loaded", FIX),
            ("nvidia_fs reports errors in its stats", "see the Error row of /proc/driver/nvidia-fs/stats and dmesg; BAR1 exhaustion shows as Bar1-map err"),
        ],
    },
    findings: &[
        &STATS_ERRORS,
        &GDS_REQUIRED,
        &GDS_NOT_EXPECTED,
        &COMPAT_ONLY,
        &STATS_UNRECOGNISED,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GdsKernelPath {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        // A host file that could not be read ends the check with the error naming it.
        let cufile = cufile_json::config_path(cx.inputs.env(cufile_json::ENV_PATH));
        CheckResult::or_read_error(
            ID,
            Facts::read(cx.host, cufile).map(|facts| judge(&facts, cx.profile.expect.gds)),
        )
    }
}

/// What the check reads, before it judges.
struct Facts {
    nvfs: ModuleState,
    version: Option<String>,
    path: PathFacts,
}

enum PathFacts {
    /// nvidia_fs is there: its device count and stats, when it has them.
    Loaded {
        count: Option<String>,
        stats: Option<String>,
    },
    /// It is not: the GPU stack's presence, and (when GPUs are usable) what the driver lists.
    Absent {
        survey: Box<Survey>,
        gpus: Option<Vec<DriverGpu>>,
        /// When GPUs are usable: cufile.json (its path and what reading it gave) and the PCI P2PDMA path,
        /// which needs no nvidia_fs.
        p2pdma: Option<(String, Result<CufileConfig, ConfigError>, P2pdma)>,
    },
}

impl Facts {
    fn read(host: &Host, cufile: String) -> Result<Facts, ReadError> {
        let modules = Modules::read(host)?;
        let nvfs = modules.state(host, "nvidia_fs")?;
        let version = optional(stable::read(host, NVFS_VERSION))?;
        let path = if nvfs.is_loaded() || version.is_some() {
            PathFacts::Loaded {
                count: optional(host.read(NVFS_DEVCOUNT))?,
                stats: optional(host.read(NVFS_STATS))?,
            }
        } else {
            let survey = Survey::read(host, Stack::Gpu);
            let (gpus, p2pdma) = match survey.gate_if_unusable(ID, false) {
                Some(_) => (None, None),
                None => {
                    let config = cufile_json::read_config(host, &cufile);
                    let p2pdma = P2pdma::read(host, config.as_ref().ok())?;
                    (
                        Some(nvidia::read_driver_gpus(host)?),
                        Some((cufile, config, p2pdma)),
                    )
                }
            };
            PathFacts::Absent {
                survey: Box::new(survey),
                gpus,
                p2pdma,
            }
        };
        Ok(Facts {
            nvfs,
            version,
            path,
        })
    }
}

fn judge(facts: &Facts, expect_gds: Option<bool>) -> Vec<CheckResult> {
    let version = &facts.version;
    let mut evidence: Vec<String> = facts.nvfs.evidence();
    evidence.push(format!(
        "{NVFS_VERSION} = {}",
        version.as_deref().unwrap_or("<missing>")
    ));

    let (survey, gpus) = match &facts.path {
        PathFacts::Loaded { count, stats } => {
            if let Some(count) = count {
                evidence.push(format!("{NVFS_DEVCOUNT} = {count}"));
            }
            let stats_errors = stats.as_deref().map(nvfs::error_row);
            let mut r = match &stats_errors {
                // nvidia-fs always prints its `Error` row: a stats file without one is not its output.
                Some(None) => CheckResult::error(
                    ID,
                    format!("cannot read {NVFS_STATS}: <no Error row: unrecognised>"),
                )
                .code(&STATS_UNRECOGNISED),
                Some(Some(row)) if nvfs::row_has_nonzero(row) => CheckResult::warn(
                    ID,
                    format!(
                        "nvidia_fs loaded ({}), but its stats report errors",
                        short_version(version)
                    ),
                )
                .evidence(&format!("{NVFS_STATS} [Error]"), row)
                .fix("see /proc/driver/nvidia-fs/stats and dmesg for the failing operation")
                .code(&STATS_ERRORS),
                _ => CheckResult::pass(
                    ID,
                    format!(
                        "nvidia_fs loaded ({}): GDS can bypass host memory",
                        short_version(version)
                    ),
                ),
            };
            r.evidence.splice(0..0, evidence);
            return vec![r];
        }
        PathFacts::Absent {
            survey,
            gpus,
            p2pdma,
        } => {
            if let Some(r) = p2pdma.as_ref().and_then(|(path, config, p2pdma)| {
                judge_p2pdma(path, config, p2pdma, &mut evidence)
            }) {
                return survey.completed(ID, vec![r]);
            }
            (survey, gpus)
        }
    };

    // No GPU, or GPUs without their driver: the GPU stack's verdict comes first.
    if let Some(mut r) = survey.gate_if_unusable(ID, expect_gds == Some(true)) {
        r.evidence.extend(evidence);
        return vec![r];
    }
    // Read whenever the survey does not decide.
    let gpus = gpus.as_deref().unwrap_or_default();
    let summary = match facts.requested_but_lacking() {
        Some(missing) => format!(
            "nvidia_fs not loaded and PCI P2PDMA not usable: use_pci_p2pdma is true but the host lacks {missing}; cuFile can only run in compatibility mode"
        ),
        None => "nvidia_fs not loaded: cuFile can only run in compatibility mode (POSIX reads bounced through host memory) unless PCI P2PDMA is configured".to_string(),
    };
    let mut r = match expect_gds {
        Some(true) => CheckResult::fail(ID, format!("{summary}; the profile requires GDS"))
            .fix(FIX)
            .code(&GDS_REQUIRED),
        Some(false) => CheckResult::skip(
            ID,
            "nvidia_fs not loaded; the profile does not expect GPUDirect Storage",
        )
        .code(&GDS_NOT_EXPECTED),
        None if gpus.is_empty() => CheckResult::skip(
            ID,
            "no NVIDIA GPU listed by the driver: GPUDirect Storage does not apply",
        )
        .code(&common::ABSENT),
        None => CheckResult::warn(ID, summary).fix(FIX).code(&COMPAT_ONLY),
    };
    r.evidence.splice(0..0, evidence);
    survey.completed(ID, vec![r])
}

impl Facts {
    /// What the host lacks for a P2PDMA path cufile.json asks for.
    fn requested_but_lacking(&self) -> Option<String> {
        match &self.path {
            PathFacts::Absent {
                p2pdma: Some((_, _, p)),
                ..
            } if p.requested && !p.ready() => Some(p.missing.join(", ")),
            _ => None,
        }
    }
}

/// Without nvidia_fs: a PASS where the PCI P2PDMA path is ready, the ERROR where cufile.json could not be read
/// and it is all that is unknown; else None, with what was read added to `evidence`.
fn judge_p2pdma(
    path: &str,
    config: &Result<CufileConfig, ConfigError>,
    p2pdma: &P2pdma,
    evidence: &mut Vec<String>,
) -> Option<CheckResult> {
    evidence.extend(p2pdma.evidence.iter().cloned());
    let with_evidence = |mut r: CheckResult, evidence: &[String]| {
        r.evidence.splice(0..0, evidence.iter().cloned());
        r
    };
    match config {
        Ok(_) if p2pdma.ready() => {
            return Some(with_evidence(
                CheckResult::pass(
                    ID,
                    "nvidia_fs not loaded and not needed: cuFile reads NVMe straight into GPU memory through PCI P2PDMA (use_pci_p2pdma, open module, CONFIG_PCI_P2PDMA)",
                ),
                evidence,
            ));
        }
        Ok(_) => {}
        Err(ConfigError::Read(e)) => {
            evidence.push(format!("{path} = {}", e.reason()));
            // Every other prerequisite is there: whether cuFile asks for P2PDMA is the one unknown.
            if !e.is_not_found() && p2pdma.missing.is_empty() {
                return Some(with_evidence(
                    CheckResult::read_error(ID, e).note(
                        "nvidia_fs not loaded: whether cuFile takes the PCI P2PDMA path (use_pci_p2pdma) is unknown",
                    ),
                    evidence,
                ));
            }
        }
        // cuFile ignores a file it cannot parse (gds.config fails it): use_pci_p2pdma is then off.
        Err(ConfigError::Parse(e)) => evidence.push(format!(
            "{path} = <syntax error at line {}, column {}: cuFile uses its defaults>",
            e.line, e.column
        )),
    }
    None
}

fn short_version(version: &Option<String>) -> String {
    version
        .as_deref()
        .map(|v| v.trim_start_matches("version:").trim().to_string())
        .filter(|v| !v.is_empty())
        .map(|v| format!("version {v}"))
        .unwrap_or("version unknown".into())
}
