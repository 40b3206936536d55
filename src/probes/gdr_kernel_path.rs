//! `gdr.kernel_path`: a GPUDirect RDMA kernel path exists (nvidia_peermem / nv_peer_mem, DMA-BUF, or on AWS the
//! amzn efa driver's own peer path).

use crate::host::{optional, Host, ReadError};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Need, Probe, ProbeMeta, Remedy, Status,
};
use crate::profile::Expect;
use crate::rules::presence::{Stack, Survey};
use crate::sysfs::efa;
use crate::sysfs::infiniband::{read_device_names, CLASS_INFINIBAND};
use crate::sysfs::modules::{ModuleState, Modules};
use crate::sysfs::nvidia::{self, DriverAndKernel, DriverGpu};

pub struct GdrKernelPath;

const ID: &str = "gdr.kernel_path";
/// NCCL also accepts the MLNX_OFED peer-memory registration of the legacy module.
const MEMORY_PEERS_NV_MEM: &str = "/sys/kernel/mm/memory_peers/nv_mem/version";
/// `ibv_reg_dmabuf_mr` arrived in Linux 5.12.
const DMABUF_MIN_KERNEL: (u32, u32) = (5, 12);

const FIX_PEERMEM: &str = "`modprobe nvidia-peermem`; make it persistent with `echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf`; \
or use the DMA-BUF path instead (open kernel module `nvidia-open`, kernel >= 5.12, rdma-core >= 34, NCCL >= 2.19 with NCCL_DMABUF_ENABLE=1)";

const PEERMEM_REQUIRED: FindingCode = FindingCode {
    code: "GDR001",
    title: "nvidia_peermem is not loaded and the profile requires it",
    explanation: "The profile names nvidia_peermem as the GPUDirect RDMA path (`expect.peermem`) and the module is \
        not loaded: NCCL's GDRDMA over peer memory is unavailable. Load it and persist it.",
    step: Some(Remedy::LoadModule),
};
const NO_PATH: FindingCode = FindingCode {
    code: "GDR002",
    title: "no GPUDirect RDMA kernel path: no peer-memory module and no DMA-BUF",
    explanation: "GPUs and RDMA devices are here but a NIC cannot DMA into GPU memory: nvidia_peermem (or the \
        legacy nv_peer_mem) is not loaded and DMA-BUF is not possible (the summary says why: the proprietary \
        module, a kernel older than 5.12, no NVIDIA driver). NCCL stages every transfer through host memory. \
        Load nvidia-peermem, or move to the open kernel module for DMA-BUF.",
    step: Some(Remedy::LoadModule),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "GPUDirect RDMA kernel path: nvidia_peermem loaded or DMA-BUF possible",
    needs: &[Need::Gpu, Need::RdmaDevice],
    explain: Explain {
        reads: "/proc/modules and /sys/module/{nvidia_peermem,nv_peer_mem} (built-ins appear only in /sys/module), \
                /sys/kernel/mm/memory_peers/nv_mem/version, /proc/driver/nvidia/version (open module?), \
                /proc/sys/kernel/osrelease (>= 5.12 for DMA-BUF), /sys/class/infiniband (RDMA devices present); \
                where neither path is there and EFAs are: /sys/bus/pci/devices/<efa>/{p2p,gdr} and \
                /sys/module/efa_nv_peermem (the amzn efa driver's own peer path)",
        why: "Without a peer-memory module or DMA-BUF, a NIC cannot DMA into GPU memory. NCCL then stages every \
              transfer through host memory (no /GDRDMA on its channels) or falls back to sockets, and multi-node \
              jobs run several times slower while every ordinary health check stays green.",
        fixes: &[
            ("neither nvidia_peermem nor DMA-BUF available", FIX_PEERMEM),
            ("profile requires nvidia_peermem specifically", "`modprobe nvidia-peermem` and persist it in /etc/modules-load.d/"),
        ],
    },
    findings: &[&PEERMEM_REQUIRED, &NO_PATH],
    ..ProbeMeta::STATIC
};

impl Probe for GdrKernelPath {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        // A host file that could not be read ends the check with the error naming it.
        CheckResult::or_read_error(
            ID,
            Facts::read(cx.host).map(|facts| vec![judge(&facts, &cx.profile.expect)]),
        )
    }
}

/// What the check reads, before it judges.
struct Facts {
    modules: Modules,
    peermem: ModuleState,
    legacy: ModuleState,
    /// Missing: MLNX_OFED's registration is not there. Unreadable: unknown, never taken for missing.
    memory_peers: Result<Option<String>, ReadError>,
    rdma: Vec<String>,
    gpus: Vec<DriverGpu>,
    platform: DriverAndKernel,
    /// The amzn efa driver's own GPU peer path (read only where no peer module and no DMA-BUF is there), and
    /// what it was read from.
    efa_peer: Option<String>,
    efa_evidence: Vec<String>,
    /// When no peer-memory module is there and a GPU or an RDMA device is not listed: the GPU stack's, then
    /// (when that one does not decide) the RDMA stack's presence survey.
    surveys: Vec<Survey>,
}

impl Facts {
    fn read(host: &Host) -> Result<Facts, ReadError> {
        let modules = Modules::read(host)?;
        let peermem = modules.state(host, "nvidia_peermem")?;
        let legacy = modules.state(host, "nv_peer_mem")?;
        let memory_peers = optional(host.read(MEMORY_PEERS_NV_MEM));
        let rdma = read_device_names(host)?;
        let gpus = nvidia::read_driver_gpus(host)?;
        let platform = DriverAndKernel::read(host)?;
        let (efa_peer, efa_evidence) = if peer_module(&peermem, &legacy, &memory_peers).is_none()
            && !dmabuf_possible(&platform)
        {
            read_efa_peer(host, &modules)?
        } else {
            (None, Vec::new())
        };
        let mut surveys = Vec::new();
        if peer_module(&peermem, &legacy, &memory_peers).is_none()
            && (gpus.is_empty() || rdma.is_empty())
        {
            for stack in [Stack::Gpu, Stack::Rdma] {
                let survey = Survey::read(host, stack);
                let decides = presence_verdict(&survey).is_some();
                surveys.push(survey);
                if decides {
                    break;
                }
            }
        }
        Ok(Facts {
            modules,
            peermem,
            legacy,
            memory_peers,
            rdma,
            gpus,
            platform,
            efa_peer,
            efa_evidence,
            surveys,
        })
    }
}

/// The amzn efa driver's peer path where EFAs with RDMA devices are on the bus: AWS's out-of-tree driver lends
/// GPU memory to the EFA itself (its `p2p` attribute names the provider), with no nvidia_peermem and no DMA-BUF.
fn read_efa_peer(
    host: &Host,
    modules: &Modules,
) -> Result<(Option<String>, Vec<String>), ReadError> {
    let functions = efa::read_functions(host)?;
    if functions.iter().all(|f| f.rdma_devices.is_empty()) {
        return Ok((None, Vec::new()));
    }
    let attribute = efa::first_peer_attribute(host, &functions)?;
    let shim = modules.state(host, efa::NV_PEERMEM_MODULE)?;
    let mut evidence = shim.evidence();
    evidence.push(match &attribute {
        Some((path, (_, value))) => format!("{path} = {value:?}"),
        None => "EFA p2p/gdr attribute = <none> (in-tree efa driver)".into(),
    });
    let path = efa::nvidia_peer_path(attribute.as_ref().map(|(_, a)| a), shim.is_loaded());
    Ok((path, evidence))
}

/// DMA-BUF registration is possible: the open NVIDIA module on a kernel with `ibv_reg_dmabuf_mr`.
fn dmabuf_possible(platform: &DriverAndKernel) -> bool {
    platform.open_module() && platform.kernel_at_least(DMABUF_MIN_KERNEL)
}

/// The peer-memory module that gives the GPUDirect RDMA path, if one is loaded or registered.
fn peer_module(
    peermem: &ModuleState,
    legacy: &ModuleState,
    memory_peers: &Result<Option<String>, ReadError>,
) -> Option<&'static str> {
    if peermem.is_loaded() {
        Some("nvidia_peermem")
    } else if legacy.is_loaded() || matches!(memory_peers, Ok(Some(_))) {
        Some("nv_peer_mem")
    } else {
        None
    }
}

/// Nothing listed by a driver is not absence: a GPU or NIC on the bus without its driver is the presence
/// rule's FAIL (its ERROR where the bus could not be read), never this check's SKIP.
fn presence_verdict(survey: &Survey) -> Option<CheckResult> {
    survey
        .gate_if_unusable(ID, false)
        .filter(|r| r.status != Status::Skip)
}

fn judge(facts: &Facts, expect: &Expect) -> CheckResult {
    let Facts {
        modules,
        peermem,
        legacy,
        memory_peers,
        rdma,
        gpus,
        platform,
        efa_peer,
        efa_evidence,
        surveys,
    } = facts;
    let mut evidence: Vec<String> = Vec::new();
    for m in [peermem, legacy] {
        evidence.extend(m.evidence());
    }
    evidence.push(format!(
        "{MEMORY_PEERS_NV_MEM} = {}",
        match &memory_peers {
            Ok(Some(version)) => version.clone(),
            Ok(None) => "<missing>".into(),
            Err(e) => e.reason(),
        }
    ));
    evidence.extend(platform.evidence());
    evidence.extend(efa_evidence.iter().cloned());
    evidence.push(format!(
        "{CLASS_INFINIBAND} = {}",
        if rdma.is_empty() {
            "<no devices>".to_string()
        } else {
            rdma.join(" ")
        }
    ));

    let peer_module = peer_module(peermem, legacy, memory_peers);
    let open_module = platform.open_module();
    let kernel_ok = platform.kernel_at_least(DMABUF_MIN_KERNEL);
    let dmabuf_possible = dmabuf_possible(platform);
    let must_have_gdr = expect.gdr == Some(true) || expect.peermem == Some(true);

    if let Some(mut r) = surveys.iter().find_map(presence_verdict) {
        r.evidence.splice(0..0, evidence);
        return r;
    }
    let result = match peer_module {
            Some(module) => CheckResult::pass(ID, format!("{module} loaded: peer-memory GPUDirect RDMA path available{}",
                if dmabuf_possible { " (DMA-BUF also possible)" } else { "" })),
            None if expect.peermem == Some(true) => CheckResult::fail(ID, "nvidia_peermem not loaded and the profile requires it")
                .fix(FIX_PEERMEM).code(&PEERMEM_REQUIRED),
            None if efa_peer.is_some() => CheckResult::pass(
                ID,
                format!(
                    "{}: the EFA driver's own GPUDirect RDMA path (nvidia_peermem not needed, DMA-BUF unavailable)",
                    efa_peer.as_deref().unwrap_or_default()
                ),
            )
            .note("registration on each EFA is proven by efa.gdr"),
            None if dmabuf_possible && !rdma.is_empty() => CheckResult::pass(
                ID,
                "nvidia_peermem not loaded; DMA-BUF GPUDirect RDMA path possible (open kernel module, kernel >= 5.12)",
            )
            .note("DMA-BUF support is proven only by a registration (gdr.loopback); NCCL uses it from 2.19 on"),
            // The legacy registration that could not be read may be the path: no verdict on it.
            None if (!gpus.is_empty() && !rdma.is_empty()) || must_have_gdr => if let Err(e) = &memory_peers {
                CheckResult::error(ID, format!("{e}: whether the nv_peer_mem GPUDirect RDMA path is registered is unknown (nvidia_peermem not loaded, DMA-BUF unavailable)")).code(&common::UNREAD)
            } else {
                let why = match (open_module, kernel_ok) {
                    // No driver at all is not a driver flavour: say what is missing.
                    (false, _) if platform.driver.is_none() && !modules.lines.iter().any(|l| l.name == "nvidia") => {
                        "no NVIDIA kernel driver loaded (no nvidia module, no /proc/driver/nvidia/version)"
                    }
                    (false, _) if platform.driver.is_none() => {
                        "NVIDIA driver flavour unknown (/proc/driver/nvidia/version unrecognised)"
                    }
                    (false, _) => "proprietary kernel module (DMA-BUF needs the open module)",
                    (true, false) => "kernel older than 5.12 (no DMA-BUF registration)",
                    (true, true) => "no RDMA device to register with",
                };
                // On EFA the amzn driver's own path was read too: say that it offers none.
                let efa = if efa_evidence.is_empty() { "" } else { ", and the EFA driver names no NVIDIA peer provider" };
                CheckResult::fail(ID, format!("no GPUDirect RDMA path: nvidia_peermem not loaded and DMA-BUF unavailable ({why}){efa}"))
                    .fix(FIX_PEERMEM).code(&NO_PATH)
            },
            None if gpus.is_empty() => CheckResult::skip(ID, "no NVIDIA GPU listed by the driver: GPUDirect RDMA does not apply").code(&common::ABSENT),
            None => CheckResult::skip(
                ID,
                format!(
                    "no RDMA device ({CLASS_INFINIBAND} is empty): GPUDirect RDMA does not apply; nvidia_peermem not loaded{}",
                    if dmabuf_possible { ", DMA-BUF would be possible (open module)" } else { "" }
                ),
            ).code(&common::ABSENT),
        };
    let mut result = result;
    result.evidence.splice(0..0, evidence);
    // What the surveys saw stays on record when they decide nothing.
    for line in surveys.iter().flat_map(|s| &s.evidence) {
        if !result.evidence.contains(line) {
            result.evidence.push(line.clone());
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::testing::{copy_scenario, run_on, run_on_root};

    #[test]
    fn no_nvidia_driver_is_not_blamed_on_the_proprietary_module() {
        // The soft-RoCE VM under roce-400g (gdr required): an RDMA device, no NVIDIA driver at all.
        let r = run_on(&GdrKernelPath, "rxe-vm", "roce-400g");
        assert_eq!(r[0].status, Status::Fail);
        assert!(
            r[0].summary.contains("no NVIDIA kernel driver loaded"),
            "{}",
            r[0].summary
        );
        assert!(!r[0].summary.contains("proprietary"), "{}", r[0].summary);
    }

    /// Reproduced: GPUs on the bus with an empty driver list (driver not bound) and an RDMA NIC gave SKIP
    /// "no NVIDIA GPU listed by the driver".
    #[test]
    fn gpus_on_the_bus_without_their_driver_fail_not_skip() {
        let dir = copy_scenario("peermem-missing-proprietary");
        let gpus = dir.path().join("proc/driver/nvidia/gpus");
        std::fs::remove_dir_all(&gpus).unwrap();
        std::fs::create_dir(&gpus).unwrap();
        let r = run_on_root(&GdrKernelPath, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Fail, "{:#?}", r[0]);
        assert!(
            r[0].summary.contains("on the PCI bus without"),
            "{}",
            r[0].summary
        );
    }

    /// Reproduced: a P5 on AWS's out-of-tree efa driver with the proprietary NVIDIA module (no DMA-BUF) failed
    /// "nvidia_peermem not loaded and DMA-BUF unavailable" while the efa driver lends GPU memory to the EFA
    /// itself: through efa_nv_peermem (`p2p` = `NVIDIA peermem`) or directly (`p2p` = `NVIDIA`).
    #[test]
    fn the_amzn_efa_peer_path_is_a_gdr_path() {
        for (scenario, provider) in [
            ("aws-p5-amzn-peermem", "NVIDIA peermem"),
            ("aws-p5-amzn-nvidia-direct", "NVIDIA"),
        ] {
            let r = run_on(&GdrKernelPath, scenario, "generic");
            assert_eq!(r[0].status, Status::Pass, "{scenario}: {:#?}", r[0]);
            let named = format!("p2p provider {provider:?}");
            assert!(r[0].summary.contains(&named), "{}", r[0].summary);
            let read = format!("/p2p = {provider:?}");
            assert!(
                r[0].evidence.iter().any(|e| e.ends_with(&read)),
                "{:#?}",
                r[0].evidence
            );
        }
        // The amzn driver with no NVIDIA provider (`p2p` empty) and no DMA-BUF: still no path, and it says so.
        let r = run_on(&GdrKernelPath, "aws-p5en-no-gdr", "generic");
        assert_eq!(r[0].status, Status::Fail, "{:#?}", r[0]);
        assert!(
            r[0].summary
                .contains("the EFA driver names no NVIDIA peer provider"),
            "{}",
            r[0].summary
        );
        // nvidia_peermem and DMA-BUF pass as before, without the EFA attribute read.
        for scenario in ["aws-p5en", "aws-p5", "azure-nd-h100-v5"] {
            let r = run_on(&GdrKernelPath, scenario, "generic");
            assert_eq!(r[0].status, Status::Pass, "{scenario}: {:#?}", r[0]);
            assert!(!r[0].summary.contains("amzn"), "{}", r[0].summary);
        }
    }

    /// Reproduced: an unreadable MLNX_OFED registration file was shown as `<missing>` and the check failed "no
    /// GPUDirect RDMA path", while that registration may be the path.
    #[test]
    fn unreadable_memory_peers_registration_is_an_error_not_missing() {
        let dir = copy_scenario("peermem-missing-proprietary");
        let nv_mem = dir.path().join("sys/kernel/mm/memory_peers/nv_mem");
        std::fs::create_dir_all(&nv_mem).unwrap();
        std::os::unix::fs::symlink("version", nv_mem.join("version")).unwrap();
        let r = run_on_root(&GdrKernelPath, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Error, "{:#?}", r[0]);
        assert!(
            r[0].summary.contains(MEMORY_PEERS_NV_MEM),
            "{}",
            r[0].summary
        );
        let line = format!("{MEMORY_PEERS_NV_MEM} = <symlink loop>");
        assert!(r[0].evidence.contains(&line), "{:#?}", r[0].evidence);
    }

    /// Reproduced: with `/proc/driver/nvidia/gpus` unreadable the node looked GPU-less and the FAIL (no
    /// GPUDirect RDMA path) became a SKIP.
    #[test]
    fn unreadable_driver_gpu_list_is_an_error_not_a_skip() {
        assert_eq!(
            run_on(&GdrKernelPath, "peermem-missing-proprietary", "generic")[0].status,
            Status::Fail
        );
        let dir = copy_scenario("peermem-missing-proprietary");
        let gpus = dir.path().join("proc/driver/nvidia/gpus");
        std::fs::rename(&gpus, dir.path().join("gpus.aside")).unwrap();
        std::os::unix::fs::symlink("gpus", &gpus).unwrap();
        let r = run_on_root(&GdrKernelPath, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Error, "{:#?}", r[0]);
        assert!(
            r[0].summary.contains("/proc/driver/nvidia/gpus"),
            "{}",
            r[0].summary
        );
    }
}
