//! Findings as data: the stable code of each thing a check can report, the remediation ladder its fix climbs,
//! and where a check is meaningful. Codes are declared where they are raised and gathered by one registry
//! (`crate::findings`); `explain CODE` documents them, JSON and JUnit carry them.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::status::Status;

/// The remediation ladder, cheapest step first: what an operator (or an automated remediation system) does
/// about a finding. Declaration order is the ladder's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
    /// Change a setting, a profile, a file or an environment variable; nothing restarts.
    Reconfigure,
    /// Load (or reload) a kernel module.
    LoadModule,
    /// Restart a service or daemon (nvidia-fabricmanager, IMEX, the subnet manager).
    RestartService,
    /// Reset the GPU (`nvidia-smi -r`) or its link.
    ResetGpu,
    /// Reboot the node (firmware, kernel command line, BIOS settings).
    Reboot,
    /// Hardware service: reseat, replace, RMA.
    ServiceRma,
}

impl Remedy {
    pub const LADDER: [Remedy; 6] = [
        Remedy::Reconfigure,
        Remedy::LoadModule,
        Remedy::RestartService,
        Remedy::ResetGpu,
        Remedy::Reboot,
        Remedy::ServiceRma,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Remedy::Reconfigure => "reconfigure",
            Remedy::LoadModule => "load_module",
            Remedy::RestartService => "restart_service",
            Remedy::ResetGpu => "reset_gpu",
            Remedy::Reboot => "reboot",
            Remedy::ServiceRma => "service_rma",
        }
    }
}

impl fmt::Display for Remedy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a node runs, as far as a check's meaning goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    BareMetal,
    /// A cloud provider's virtual machine (EC2, Azure, GCE): the PCIe topology and firmware are the hypervisor's.
    CloudVm,
    /// A container: the host's devices and modules seen through the container's mounts.
    Container,
}

impl Environment {
    pub const ALL: [Environment; 3] = [
        Environment::BareMetal,
        Environment::CloudVm,
        Environment::Container,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Environment::BareMetal => "bare_metal",
            Environment::CloudVm => "cloud_vm",
            Environment::Container => "container",
        }
    }
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One distinct thing a check can report, declared once as a constant where it is raised. Its `code` is
/// stable: it never changes meaning and is never removed (the registry's test pins every code ever released).
#[derive(Debug)]
pub struct FindingCode {
    /// Three capital letters naming the check family, then three digits (`GDR001`).
    pub code: &'static str,
    /// One line: what was found.
    pub title: &'static str,
    /// Why it matters and what to look at, for `explain CODE`.
    pub explanation: &'static str,
    /// The ladder's step that fixes it; None for what needs no fix (hardware absent, an input not given).
    pub step: Option<Remedy>,
}

/// A finding as a report carries it: which code decided (part of) a result, with what status and words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub code: String,
    pub status: Status,
    pub message: String,
    /// The ladder's step (machine-readable); absent where the code has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Remedy>,
    /// The human fix text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn new(
        code: &FindingCode,
        status: Status,
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Self {
        Finding {
            code: code.code.to_string(),
            status,
            message: message.into(),
            step: code.step,
            fix: fix.filter(|f| !f.is_empty()),
        }
    }
}

/// Findings any check can report: an input it could not read and how the runner ended a probe that did not
/// answer (the `RUN` family), and the presence rule's verdicts on hardware, its kernel driver and its library
/// (the `HWP` family, `rules/presence.rs`).
pub mod common {
    use super::{FindingCode, Remedy};

    pub const UNREAD: FindingCode = FindingCode {
        code: "RUN001",
        title: "an input the verdict rests on could not be read",
        explanation: "A host file, directory or library answer the check judges could not be read (permission, \
            I/O error, a recorded tree without it). The check does not pass on data it did not read: the error \
            names the path and the reason. Run as root, or record the tree with `snapshot` as root.",
        step: None,
    };
    pub const TIMED_OUT: FindingCode = FindingCode {
        code: "RUN002",
        title: "the probe did not answer before its deadline",
        explanation: "The probe's own deadline (`timeout` in the profile) or the run's (`--timeout`) was \
            reached first. A merely slow node needs a longer deadline; a probe stuck in the kernel points at a \
            wedged driver (see dmesg).",
        step: Some(Remedy::Reconfigure),
    };
    pub const LIBRARY_HUNG: FindingCode = FindingCode {
        code: "RUN003",
        title: "a vendor library hung or crashed",
        explanation: "A library call (NVML, CUDA, cuFile, libibverbs) hung or crashed the child process that \
            made it, or hung earlier in this run so it was not called again. Check `dmesg` for Xid and driver \
            errors; restarting the driver's services or resetting the GPU usually clears a wedged driver.",
        step: Some(Remedy::ResetGpu),
    };
    pub const INTERRUPTED: FindingCode = FindingCode {
        code: "RUN004",
        title: "the run was interrupted before the check finished",
        explanation: "A signal (SIGTERM, SIGINT) stopped the run; the checks it cut short are errors. Run again.",
        step: None,
    };
    pub const PROBE_FAILED: FindingCode = FindingCode {
        code: "RUN005",
        title: "the probe itself failed (a bug, or its child process was lost)",
        explanation: "The probe panicked, returned nothing, or its child process could not be started or was \
            lost. This is a bug in fabric-preflight or a starved node: report it with the run's evidence.",
        step: None,
    };
    pub const LIBRARY_UNANSWERED: FindingCode = FindingCode {
        code: "RUN006",
        title: "a vendor library could not be asked",
        explanation: "The library the check needs could not be loaded or refused the call (not installed, a \
            wrong version, no permission on its device files). The error names the library and its answer.",
        step: Some(Remedy::Reconfigure),
    };
    pub const REQUIRED_SKIPPED: FindingCode = FindingCode {
        code: "RUN008",
        title: "the profile requires this check, but it skipped",
        explanation: "A check the profile marks `required` found nothing to judge (its skip's own finding, kept \
            beside this one, says what was missing). Either the node lacks what its profile expects, or the \
            profile does not fit the node: pick the profile for this node's shape (`--profile auto`, `profiles`).",
        step: Some(Remedy::Reconfigure),
    };
    pub const RECORDING_SHORT: FindingCode = FindingCode {
        code: "RUN007",
        title: "the recording holds fewer answers than this replay needs",
        explanation: "Replaying a recorded tree (`--root` with vendor-answers.json), the recording holds fewer \
            measurements than the check asks for (it was made on another node shape, or with another version). \
            Record the tree again with `snapshot`.",
        step: None,
    };

    pub const EXPECTED_ABSENT: FindingCode = FindingCode {
        code: "HWP001",
        title: "the profile expects hardware that is not on the PCI bus",
        explanation: "No device of the kind the check judges is on the PCI bus, but the profile expects one.             Check that the devices are seated and powered (`lspci`) and that the BIOS enables their slots.",
        step: Some(Remedy::ServiceRma),
    };
    pub const ABSENT: FindingCode = FindingCode {
        code: "HWP002",
        title: "the hardware or input the check judges is absent: it does not apply",
        explanation: "A skip: nothing of the kind the check judges is on this host (none on the PCI bus and             none listed by a driver), or the input it reads was not given. The summary names what is absent. A             device on the bus without its driver is never this skip (HWP003).",
        step: None,
    };
    pub const UNBOUND: FindingCode = FindingCode {
        code: "HWP003",
        title: "hardware on the PCI bus without its kernel driver",
        explanation: "Devices of this kind are on the PCI bus but no kernel driver is bound to them: the             checks that need them cannot work. Load the driver (the fix names the module and `dmesg` shows why             it did not bind).",
        step: Some(Remedy::LoadModule),
    };
    pub const FLASH_RECOVERY: FindingCode = FindingCode {
        code: "HWP004",
        title: "an RDMA NIC is in flash-recovery mode: its firmware did not boot",
        explanation: "The NIC shows its recovery device id on the PCI bus: its firmware did not boot and it             is unusable until its firmware is burnt again (the fix names the tool); a NIC that stays there is             serviced.",
        step: Some(Remedy::ServiceRma),
    };
    pub const LIBRARY_MISSING: FindingCode = FindingCode {
        code: "HWP005",
        title: "the kernel driver is there but its user-space library cannot be loaded",
        explanation: "The devices and their kernel driver are present but the library that drives them             (libnvidia-ml, libcuda, libibverbs, libcufile) cannot be loaded: install it, or in a container             mount it (the NVIDIA container toolkit, the RDMA device plugin).",
        step: Some(Remedy::Reconfigure),
    };
    pub const LIBRARY_BROKEN: FindingCode = FindingCode {
        code: "HWP006",
        title: "the user-space library loads but fails",
        explanation: "The library lacks a symbol the check needs or its call failed: a library that does not             match the kernel driver, or a driver in a bad state. The fix names the call and its answer.",
        step: Some(Remedy::Reconfigure),
    };
    pub const NOT_EXPOSED: FindingCode = FindingCode {
        code: "HWP007",
        title: "no GPU is exposed to this container",
        explanation: "GPUs bound to the nvidia driver are on the host's PCI bus but neither the library nor             /proc/driver/nvidia/gpus lists any here: a container that was given no GPU. Request GPUs for the             pod, or skip the GPU checks in a pod that needs none.",
        step: Some(Remedy::Reconfigure),
    };
    pub const LIBRARY_LISTS_NONE: FindingCode = FindingCode {
        code: "HWP008",
        title: "the library lists no device while the bus and the driver show them",
        explanation: "The devices and their driver are there, but the library lists none: libibverbs without             a provider for them, or a container without the devices mounted.",
        step: Some(Remedy::Reconfigure),
    };
    pub const MANAGEMENT_LEFT_ALONE: FindingCode = FindingCode {
        code: "HWP009",
        title: "management devices left alone: they carry no job's data",
        explanation: "A skip: RDMA devices that serve management only (a BMC's or a DPU's own port, named in \
            the evidence with why) are not measured by the transfer checks.",
        step: None,
    };
    pub const EFA_LEFT_ALONE: FindingCode = FindingCode {
        code: "HWP010",
        title: "EFA devices left alone: they offer no reliable connected (RC) queue pairs",
        explanation:
            "A skip: the RC loopback checks (rdma.loopback, gdr.loopback) cannot run on EFA, which \
            offers SRD only; efa.gdr judges GPU memory registration on EFA instead.",
        step: None,
    };

    /// Every common code, for the registry.
    pub const ALL: &[&FindingCode] = &[
        &UNREAD,
        &TIMED_OUT,
        &LIBRARY_HUNG,
        &INTERRUPTED,
        &PROBE_FAILED,
        &LIBRARY_UNANSWERED,
        &RECORDING_SHORT,
        &REQUIRED_SKIPPED,
        &EXPECTED_ABSENT,
        &ABSENT,
        &UNBOUND,
        &FLASH_RECOVERY,
        &LIBRARY_MISSING,
        &LIBRARY_BROKEN,
        &NOT_EXPOSED,
        &LIBRARY_LISTS_NONE,
        &MANAGEMENT_LEFT_ALONE,
        &EFA_LEFT_ALONE,
    ];
}
