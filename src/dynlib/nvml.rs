//! NVML (`libnvidia-ml.so.1`, opened at run time by nvml-wrapper): everything the GPU probes read from it,
//! gathered into serialisable facts so a recorded machine replays exactly what NVML said.
//!
//! Each reading is an [`Answer`]: the value, or the error text of the call that produced it (an old driver lacks
//! some calls; a VM hides others). Nothing here judges.

use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, P2pCapabilitiesIndex, P2pStatus, RetirementCause, TopologyLevel,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use serde::{Deserialize, Serialize};

use super::LibError;
use crate::child::breadcrumb;
use crate::model::Library;

/// A reading or the error of the call that should have produced it.
pub type Answer<T> = Result<T, String>;

/// Key of the facts in recorded vendor answers.
pub const ANSWERS_KEY: &str = "nvml";

/// The answer of a call that was not asked (its GPU's handle failed).
pub const NOT_READ: &str = "not read";
/// Key of the PCIe link readings taken while a copy loop kept the links busy.
pub const UNDER_LOAD_KEY: &str = "nvml.pcie_under_load";

/// NVLink links NVML may report per GPU (NVML_NVLINK_MAX_LINKS).
const MAX_NVLINKS: u32 = 18;

/// What NVML says about the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlFacts {
    /// Set when NVML could not be opened or initialised (`nvmlInit_v2`); everything else is then empty.
    pub nvml_error: Option<LibError>,
    pub driver_version: Answer<String>,
    /// `nvmlSystemGetCudaDriverVersion_v2`: 13000 for CUDA 13.0.
    pub cuda_driver_version: Answer<i32>,
    pub nvml_version: Answer<String>,
    pub device_count: Answer<u32>,
    pub gpus: Vec<GpuFacts>,
    /// Every unordered pair of GPUs (a < b by NVML index).
    pub pairs: Vec<PairFacts>,
}

impl Default for GpuFacts {
    fn default() -> Self {
        fn unread<T>() -> Answer<T> {
            Err(NOT_READ.to_string())
        }
        GpuFacts {
            index: 0,
            name: unread(),
            uuid: unread(),
            pci_bus_id: unread(),
            persistence: unread(),
            mig_enabled: unread(),
            ecc_enabled: unread(),
            ecc_uncorrected_volatile: unread(),
            retired_pages_sbe: unread(),
            retired_pages_dbe: unread(),
            retired_pages_pending: unread(),
            remapped_rows: unread(),
            pcie_gen_current: unread(),
            pcie_gen_max: unread(),
            pcie_gen_gpu_max: unread(),
            pcie_width_current: unread(),
            pcie_width_max: unread(),
            pcie_speed_current_mts: unread(),
            pcie_speed_max_mts: unread(),
            pcie_replay_counter: unread(),
            bar1_total_bytes: unread(),
            bar1_used_bytes: unread(),
            memory_total_bytes: unread(),
            numa_node: unread(),
            nvlink: Some(NvLinkFacts {
                links: vec![],
                fabric: unread(),
                quality: None,
            }),
        }
    }
}

impl NvmlFacts {
    /// NVML could not be opened: `error` says why, every other field repeats that it is unavailable.
    pub fn absent(error: LibError) -> Self {
        let unavailable = || "NVML not available".to_string();
        NvmlFacts {
            nvml_error: Some(error),
            driver_version: Err(unavailable()),
            cuda_driver_version: Err(unavailable()),
            nvml_version: Err(unavailable()),
            device_count: Err(unavailable()),
            gpus: vec![],
            pairs: vec![],
        }
    }
}

/// One GPU as NVML sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    /// NVML index (PCI order; CUDA's order may differ: join on the bus id).
    pub index: u32,
    pub name: Answer<String>,
    pub uuid: Answer<String>,
    /// Lower case with a 4-digit domain (`0000:00:06.0`), the sysfs form.
    pub pci_bus_id: Answer<String>,
    pub persistence: Answer<bool>,
    pub mig_enabled: Answer<bool>,
    pub ecc_enabled: Answer<bool>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Answer<u64>,
    /// Pre-Ampere page retirement (Ampere and later remap rows instead and answer "not supported").
    pub retired_pages_sbe: Answer<u32>,
    pub retired_pages_dbe: Answer<u32>,
    pub retired_pages_pending: Answer<bool>,
    pub remapped_rows: Answer<RemappedRows>,
    pub pcie_gen_current: Answer<u32>,
    /// Highest generation the GPU and its slot together support.
    pub pcie_gen_max: Answer<u32>,
    /// Highest generation the GPU alone supports.
    pub pcie_gen_gpu_max: Answer<u32>,
    pub pcie_width_current: Answer<u32>,
    pub pcie_width_max: Answer<u32>,
    pub pcie_speed_current_mts: Answer<u32>,
    pub pcie_speed_max_mts: Answer<u32>,
    /// PCIe replays (link-level retransmissions) since the driver loaded.
    pub pcie_replay_counter: Answer<u32>,
    pub bar1_total_bytes: Answer<u64>,
    pub bar1_used_bytes: Answer<u64>,
    pub memory_total_bytes: Answer<u64>,
    pub numa_node: Answer<u32>,
    /// NVLink links and NVLink-fabric registration; `None` in recordings made before they were asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink: Option<NvLinkFacts>,
}

/// One GPU's NVLink links and its place in the NVLink fabric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvLinkFacts {
    /// `nvmlDeviceGetNvLinkState` for links 0..NVML_NVLINK_MAX_LINKS in link order: active or not, or the error
    /// (NOT_SUPPORTED: the GPU has no such link; INVALID_ARGUMENT: past its last link). Empty: not asked.
    pub links: Vec<Answer<bool>>,
    /// `nvmlDeviceGetGpuFabricInfoV` (v2), else `nvmlDeviceGetGpuFabricInfo` (v1) on a driver without it.
    pub fabric: Answer<FabricInfo>,
    /// NVLink5 per-link speed and error counters, read twice; `None` in recordings made before they were asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<LinkQuality>,
}

/// Each active link's speed and counters (`nvmlDeviceGetFieldValues`, scope = link), read twice
/// [`QUALITY_INTERVAL`] apart where the GPU reports them, so a climbing count is seen within one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkQuality {
    pub first: Vec<LinkCounters>,
    /// `None` when no counter was supported at the first read (NVLink4 and older answer NOT_SUPPORTED).
    pub second: Option<Vec<LinkCounters>>,
    /// Milliseconds between the two reads.
    pub interval_ms: u64,
}

/// One link's readings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkCounters {
    pub link: u32,
    /// `NVML_FI_DEV_NVLINK_GET_SPEED`: MB/s (53125 on NVLink5, 26562 on NVLink4).
    pub speed_mbps: Answer<u64>,
    /// `NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS` / `_FAILED_EVENTS` (R570, NVLink5).
    pub recoveries: Answer<u64>,
    pub recoveries_failed: Answer<u64>,
    /// `NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS`: errors left after FEC (FEC-corrected symbols are not read).
    pub effective_errors: Answer<u64>,
}

impl LinkCounters {
    fn any_counter(&self) -> bool {
        self.recoveries.is_ok() || self.recoveries_failed.is_ok() || self.effective_errors.is_ok()
    }
}

/// Time between the two counter reads: long enough for a link in trouble to retrain (a recovery takes
/// milliseconds), short enough for the static set.
pub const QUALITY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// `nvmlGpuFabricInfo_v4_t` (or v3, v2, v1): how far the fabric manager (NVSwitch systems) or the NVLink
/// domain's controller (NVL72) got registering the GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricInfo {
    /// The call that answered.
    pub call: String,
    /// `NVML_GPU_FABRIC_STATE_*`: 0 not supported, 1 not started, 2 in progress, 3 completed.
    pub state: u8,
    /// The registration's outcome (an `nvmlReturn_t` name; meaningful once completed).
    pub status: String,
    /// v1–v3's `cliqueId`; from v4, the first unicast-pointer clique's id (what v3 reported), 0 without one.
    pub clique_id: u32,
    /// 32 hex digits; all zero outside a multi-node NVLink domain.
    pub cluster_uuid: String,
    /// `NVML_GPU_FABRIC_HEALTH_MASK_*` fields; absent from the v1 answer.
    pub health_mask: Option<u32>,
    /// `NVML_GPU_FABRIC_HEALTH_SUMMARY_*`: 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity; v3 only.
    #[serde(default)]
    pub health_summary: Option<u8>,
    /// v4's clique list (type, id), sorted by type then id; `None` from v1–v3 and in recordings made before v4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cliques: Option<Vec<FabricClique>>,
}

/// `nvmlGpuFabricClique_v1_t`: one clique the GPU belongs to, per kind of access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricClique {
    /// `NVML_GPU_FABRIC_CLIQUE_TYPE_*`.
    pub kind: u8,
    pub id: u32,
}

impl FabricClique {
    /// NVML's clique types, in the order CUDA's `CUcliqueType` numbers them (NVML's values are not published
    /// beside the names; the order is the one both headers list).
    pub fn kind_name(&self) -> String {
        match self.kind {
            CLIQUE_UNICAST_POINTER => "unicast pointer".into(),
            1 => "multicast pointer".into(),
            2 => "unicast logical endpoint".into(),
            3 => "multicast logical endpoint".into(),
            other => format!("type {other}"),
        }
    }
}

pub const FABRIC_STATE_NOT_SUPPORTED: u8 = 0;
pub const FABRIC_STATE_NOT_STARTED: u8 = 1;
pub const FABRIC_STATE_IN_PROGRESS: u8 = 2;
pub const FABRIC_STATE_COMPLETED: u8 = 3;
pub const FABRIC_HEALTH_SUMMARY_UNHEALTHY: u8 = 2;
pub const FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY: u8 = 3;
/// `NVML_GPU_FABRIC_CLIQUE_TYPE_UNICAST_POINTER`: the clique v3's `cliqueId` reported.
const CLIQUE_UNICAST_POINTER: u8 = 0;
/// Health-mask fields nvml-wrapper-sys 0.10 predates (R590 partition, R615 global fabric manager), from
/// nvml.h and the kernel's `nvlink_inband_msg.h`: 2 bits each at 12 and 14.
const HEALTH_SHIFT_PARTITION_ASSIGNED: u32 = 12;
const HEALTH_SHIFT_GFM_STATE: u32 = 14;

/// The health mask's fields (`nvml.h` NVML_GPU_FABRIC_HEALTH_MASK_*): `Some(true)` = the condition holds,
/// `Some(false)` = it does not, `None` = the driver does not report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FabricHealth {
    pub degraded_bandwidth: Option<bool>,
    pub route_recovery_in_progress: Option<bool>,
    pub route_unhealthy: Option<bool>,
    pub access_timeout_recovery: Option<bool>,
    /// Why the configuration is wrong (`Some(None)`: it is right).
    pub incorrect_configuration: Option<Option<String>>,
    /// The fabric assigned the GPU a partition (R590+).
    pub partition_assigned: Option<bool>,
    /// The global fabric manager (NMX controller on NVL72) is connected (R615+).
    pub gfm_connected: Option<bool>,
}

impl FabricInfo {
    /// `nvmlGpuFabricInfo_v1_t` has no mask: `None`.
    pub fn health(&self) -> Option<FabricHealth> {
        use nvml_wrapper_sys::bindings as b;
        let mask = self.health_mask?;
        let field = |shift: u32, width: u32| (mask >> shift) & width;
        // Each 2-bit field: 0 not supported, 1 true (connected), 2 false (disconnected).
        let yes_no = |shift| match field(shift, 3) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        };
        let config = match field(
            b::NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION,
            b::NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION,
        ) {
            b::NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NOT_SUPPORTED => None,
            b::NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE => Some(None),
            cause => Some(Some(incorrect_configuration_name(cause))),
        };
        Some(FabricHealth {
            degraded_bandwidth: yes_no(b::NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW),
            route_recovery_in_progress: yes_no(b::NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY),
            route_unhealthy: yes_no(b::NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY),
            access_timeout_recovery: yes_no(
                b::NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
            ),
            incorrect_configuration: config,
            partition_assigned: yes_no(HEALTH_SHIFT_PARTITION_ASSIGNED),
            gfm_connected: yes_no(HEALTH_SHIFT_GFM_STATE),
        })
    }

    /// The cluster UUID is all zero: the GPU belongs to no multi-node NVLink domain (or was not placed in one).
    pub fn zero_cluster(&self) -> bool {
        self.cluster_uuid.chars().all(|c| c == '0')
    }

    /// The fabric names a domain for this GPU: a clique or a cluster UUID other than zero.
    pub fn names_a_domain(&self) -> bool {
        self.clique_id != 0 || !self.zero_cluster()
    }

    /// The v3 health summary in words, where the driver gives one.
    pub fn health_summary_name(&self) -> Option<String> {
        Some(match self.health_summary? {
            0 => "not supported".into(),
            1 => "healthy".into(),
            FABRIC_HEALTH_SUMMARY_UNHEALTHY => "unhealthy".into(),
            FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY => "limited capacity".into(),
            other => format!("unknown summary {other}"),
        })
    }

    /// `not supported`, `not started`, `in progress`, `completed`.
    pub fn state_name(&self) -> String {
        match self.state {
            FABRIC_STATE_NOT_SUPPORTED => "not supported".into(),
            FABRIC_STATE_NOT_STARTED => "not started".into(),
            FABRIC_STATE_IN_PROGRESS => "in progress".into(),
            FABRIC_STATE_COMPLETED => "completed".into(),
            other => format!("unknown state {other}"),
        }
    }
}

/// `NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*` causes 2–8 (6, 7 from R590's nvml.h, 8 from the
/// kernel's `nvlink_inband_msg.h`); a later cause is still a wrong configuration, named by its number.
fn incorrect_configuration_name(cause: u32) -> String {
    match cause {
        2 => "incorrect system GUID".into(),
        3 => "incorrect chassis serial number".into(),
        4 => "no partition assigned".into(),
        5 => "insufficient NVLinks".into(),
        6 => "incompatible GPU firmware".into(),
        7 => "invalid location".into(),
        8 => "GPU state invalid".into(),
        other => format!("cause {other}, unknown to this build"),
    }
}

/// `nvmlDeviceGetRemappedRows` (Ampere and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    /// A remapping waits for a GPU reset.
    pub pending: bool,
    /// A remapping failed: the GPU needs service.
    pub failure: bool,
}

/// P2P between two GPUs (`nvmlDeviceGetP2PStatus` per capability, `nvmlDeviceGetTopologyCommonAncestor`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairFacts {
    pub a: u32,
    pub b: u32,
    /// [`P2P_OK`] or why not (`chipset not supported`, ...).
    pub read: Answer<String>,
    pub write: Answer<String>,
    pub atomics: Answer<String>,
    pub nvlink: Answer<String>,
    /// `nvidia-smi topo` label of the common ancestor: `internal`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`.
    pub topology: Answer<String>,
}

pub const P2P_OK: &str = "OK";

/// One PCIe link reading of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSample {
    pub index: u32,
    pub pci_bus_id: Answer<String>,
    pub gen: Answer<u32>,
    pub width: Answer<u32>,
    pub speed_mts: Answer<u32>,
}

fn text(call: &str, e: NvmlError) -> String {
    let words = words(&e);
    match e {
        // Not NVML's own return codes: the words say it all.
        NvmlError::Utf8Error(_)
        | NvmlError::NulError(_)
        | NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::StringTooLong { .. }
        | NvmlError::IncorrectBits(_)
        | NvmlError::SetReleaseFailed
        | NvmlError::GetPciInfoFailed
        | NvmlError::PciInfoToCFailed => format!("{call}: {words}"),
        other => {
            let code = nvml_wrapper_sys::bindings::nvmlReturn_t::from(other);
            format!("{call}: {} ({words})", return_name(code))
        }
    }
}

/// What a per-GPU error answer means for a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The GPU or driver does not offer the call (NOT_SUPPORTED, a symbol older drivers lack): judges nothing.
    Unsupported,
    /// Not asked (the handle itself failed, and says so).
    NotAsked,
    /// NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus.
    Lost,
    /// This process may not ask (NO_PERMISSION): unknown, not bad.
    Denied,
    /// Any other error: the GPU answered, with an error.
    Failed,
}

/// Classifies an error answer, by NVML's code name where the text has one and by nvml-wrapper's words for
/// answers recorded before the names were (`GpuLost`: "device fell off the bus …").
pub fn fault(text: &str) -> Fault {
    let has = |s: &str| text.contains(s);
    if text == NOT_READ {
        Fault::NotAsked
    } else if has("NVML_ERROR_NOT_SUPPORTED")
        || has("NVML_ERROR_FUNCTION_NOT_FOUND")
        || has("not available on the target device")
        || has("function symbol failed to load")
        || has("couldn't be found in a shared library")
        || has("undefined symbol")
    {
        Fault::Unsupported
    } else if has("NVML_ERROR_GPU_IS_LOST") || has("fell off the bus") {
        Fault::Lost
    } else if has("NVML_ERROR_NO_PERMISSION") || has("does not have permission") {
        Fault::Denied
    } else {
        Fault::Failed
    }
}

/// nvml-wrapper's text for the error, with the loader's own message where there is one.
fn words(e: &NvmlError) -> String {
    let inner = super::innermost_message(e);
    let outer = e.to_string();
    if inner == outer || matches!(e, NvmlError::LibloadingError(_)) {
        inner
    } else {
        format!("{outer}: {inner}")
    }
}

fn ask<T>(call: &str, f: impl FnOnce() -> Result<T, NvmlError>) -> Answer<T> {
    breadcrumb(call);
    f().map_err(|e| text(call, e))
}

/// Opens NVML (`nvmlInit_v2`); the error is the loader's message when the library is absent.
fn open() -> Result<Nvml, LibError> {
    const CALL: &str = "nvmlInit_v2";
    breadcrumb(CALL);
    Nvml::init().map_err(|e| match e {
        NvmlError::LibloadingError(_) => {
            LibError::not_loaded(Library::Nvml, super::innermost_message(&e))
        }
        NvmlError::FailedToLoadSymbol(_) => {
            LibError::missing_symbol(Library::Nvml, CALL, text(CALL, e))
        }
        other => {
            let words = words(&other);
            let code = nvml_wrapper_sys::bindings::nvmlReturn_t::from(other);
            let text = format!("{} ({words})", return_name(code));
            LibError::failed(Library::Nvml, CALL, Some(i64::from(code)), text)
        }
    })
}

/// `nvmlReturn_t` names from `nvml.h`: the words an operator searches for.
fn return_name(code: u32) -> &'static str {
    const NAMES: [&str; 30] = [
        "NVML_SUCCESS",
        "NVML_ERROR_UNINITIALIZED",
        "NVML_ERROR_INVALID_ARGUMENT",
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_NO_PERMISSION",
        "NVML_ERROR_ALREADY_INITIALIZED",
        "NVML_ERROR_NOT_FOUND",
        "NVML_ERROR_INSUFFICIENT_SIZE",
        "NVML_ERROR_INSUFFICIENT_POWER",
        "NVML_ERROR_DRIVER_NOT_LOADED",
        "NVML_ERROR_TIMEOUT",
        "NVML_ERROR_IRQ_ISSUE",
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        "NVML_ERROR_CORRUPTED_INFOROM",
        "NVML_ERROR_GPU_IS_LOST",
        "NVML_ERROR_RESET_REQUIRED",
        "NVML_ERROR_OPERATING_SYSTEM",
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        "NVML_ERROR_IN_USE",
        "NVML_ERROR_MEMORY",
        "NVML_ERROR_NO_DATA",
        "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
        "NVML_ERROR_INSUFFICIENT_RESOURCES",
        "NVML_ERROR_FREQ_NOT_SUPPORTED",
        "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        "NVML_ERROR_DEPRECATED",
        "NVML_ERROR_NOT_READY",
        "NVML_ERROR_GPU_NOT_FOUND",
        "NVML_ERROR_INVALID_STATE",
    ];
    NAMES
        .get(code as usize)
        .copied()
        .unwrap_or("NVML_ERROR_UNKNOWN")
}

/// Everything the GPU probes need, read once.
pub fn collect() -> NvmlFacts {
    let nvml = match open() {
        Ok(n) => n,
        Err(e) => return NvmlFacts::absent(e),
    };
    let device_count = ask("nvmlDeviceGetCount_v2", || nvml.device_count());
    let mut devices = Vec::new();
    let mut gpus = Vec::new();
    for index in 0..*device_count.as_ref().unwrap_or(&0) {
        match ask("nvmlDeviceGetHandleByIndex_v2", || {
            nvml.device_by_index(index)
        }) {
            Ok(device) => {
                gpus.push(gpu_facts(&nvml, index, &device));
                devices.push((index, device));
            }
            Err(e) => gpus.push(GpuFacts {
                index,
                name: Err(e),
                ..GpuFacts::default()
            }),
        }
    }
    read_quality_again(&nvml, &devices, &mut gpus);
    let mut pairs = Vec::new();
    for (i, (a, da)) in devices.iter().enumerate() {
        for (b, db) in &devices[i + 1..] {
            let p2p = |cap, call| ask(call, || da.p2p_status(db, cap)).map(p2p_name);
            pairs.push(PairFacts {
                a: *a,
                b: *b,
                read: p2p(P2pCapabilitiesIndex::Read, "nvmlDeviceGetP2PStatus(READ)"),
                write: p2p(P2pCapabilitiesIndex::Write, "nvmlDeviceGetP2PStatus(WRITE)"),
                atomics: p2p(
                    P2pCapabilitiesIndex::Atomics,
                    "nvmlDeviceGetP2PStatus(ATOMICS)",
                ),
                nvlink: p2p(
                    P2pCapabilitiesIndex::NvLink,
                    "nvmlDeviceGetP2PStatus(NVLINK)",
                ),
                topology: ask("nvmlDeviceGetTopologyCommonAncestor", || {
                    nvml.topology_common_ancestor(da, db)
                })
                .map(|l| topology_label(l).to_string()),
            });
        }
    }
    let facts = NvmlFacts {
        nvml_error: None,
        driver_version: ask("nvmlSystemGetDriverVersion", || nvml.sys_driver_version()),
        cuda_driver_version: ask("nvmlSystemGetCudaDriverVersion_v2", || {
            nvml.sys_cuda_driver_version()
        }),
        nvml_version: ask("nvmlSystemGetNVMLVersion", || nvml.sys_nvml_version()),
        device_count,
        gpus,
        pairs,
    };
    drop(devices);
    close(nvml);
    facts
}

/// `nvmlShutdown`, named like every other call: a driver can hang here too.
fn close(nvml: Nvml) {
    let _ = ask("nvmlShutdown", move || nvml.shutdown());
}

fn gpu_facts(nvml: &Nvml, index: u32, d: &Device<'_>) -> GpuFacts {
    let bar1 = ask("nvmlDeviceGetBAR1MemoryInfo", || d.bar1_memory_info());
    GpuFacts {
        index,
        name: ask("nvmlDeviceGetName", || d.name()),
        uuid: ask("nvmlDeviceGetUUID", || d.uuid()),
        pci_bus_id: ask("nvmlDeviceGetPciInfo_v3", || d.pci_info())
            .map(|p| normalize_bus_id(&p.bus_id)),
        persistence: ask("nvmlDeviceGetPersistenceMode", || d.is_in_persistent_mode()),
        mig_enabled: ask("nvmlDeviceGetMigMode", || d.mig_mode()).map(|m| m.current == 1),
        ecc_enabled: ask("nvmlDeviceGetEccMode", || d.is_ecc_enabled())
            .map(|m| m.currently_enabled),
        ecc_uncorrected_volatile: ask("nvmlDeviceGetTotalEccErrors", || {
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        }),
        retired_pages_sbe: ask("nvmlDeviceGetRetiredPages(SBE)", || {
            d.retired_pages(RetirementCause::MultipleSingleBitEccErrors)
        })
        .map(|p| p.len() as u32),
        retired_pages_dbe: ask("nvmlDeviceGetRetiredPages(DBE)", || {
            d.retired_pages(RetirementCause::DoubleBitEccError)
        })
        .map(|p| p.len() as u32),
        retired_pages_pending: ask("nvmlDeviceGetRetiredPagesPendingStatus", || {
            d.are_pages_pending_retired()
        }),
        remapped_rows: remapped_rows(nvml, d),
        pcie_gen_current: ask("nvmlDeviceGetCurrPcieLinkGeneration", || {
            d.current_pcie_link_gen()
        }),
        pcie_gen_max: ask("nvmlDeviceGetMaxPcieLinkGeneration", || {
            d.max_pcie_link_gen()
        }),
        pcie_gen_gpu_max: gpu_max_pcie_gen(nvml, d),
        pcie_width_current: ask("nvmlDeviceGetCurrPcieLinkWidth", || {
            d.current_pcie_link_width()
        }),
        pcie_width_max: ask("nvmlDeviceGetMaxPcieLinkWidth", || d.max_pcie_link_width()),
        pcie_speed_current_mts: ask("nvmlDeviceGetPcieLinkSpeed", || d.pcie_link_speed()),
        pcie_speed_max_mts: ask("nvmlDeviceGetPcieLinkMaxSpeed", || d.max_pcie_link_speed())
            .and_then(|s| {
                s.as_integer()
                    .ok_or_else(|| "nvmlDeviceGetPcieLinkMaxSpeed: invalid".to_string())
            }),
        pcie_replay_counter: ask("nvmlDeviceGetPcieReplayCounter", || d.pcie_replay_counter()),
        bar1_total_bytes: bar1.clone().map(|b| b.total),
        bar1_used_bytes: bar1.map(|b| b.used),
        memory_total_bytes: ask("nvmlDeviceGetMemoryInfo", || d.memory_info()).map(|m| m.total),
        numa_node: ask("nvmlDeviceGetNumaNodeId", || d.numa_node_id()),
        nvlink: Some(nvlink_facts(nvml, d)),
    }
}

fn nvlink_facts(nvml: &Nvml, d: &Device<'_>) -> NvLinkFacts {
    let links: Vec<Answer<bool>> = (0..MAX_NVLINKS)
        .map(|link| {
            ask(&format!("nvmlDeviceGetNvLinkState(link {link})"), || {
                d.link_wrapper_for(link).is_active()
            })
        })
        .collect();
    let active: Vec<u32> = (0u32..)
        .zip(&links)
        .filter(|(_, a)| matches!(a, Ok(true)))
        .map(|(l, _)| l)
        .collect();
    let quality = (!active.is_empty()).then(|| LinkQuality {
        first: active.iter().map(|&l| link_counters(nvml, d, l)).collect(),
        second: None,
        interval_ms: QUALITY_INTERVAL.as_millis() as u64,
    });
    NvLinkFacts {
        links,
        fabric: fabric_info(nvml, d),
        quality,
    }
}

/// The second read of every GPU whose first read had a counter, [`QUALITY_INTERVAL`] after the first.
fn read_quality_again(nvml: &Nvml, devices: &[(u32, Device<'_>)], gpus: &mut [GpuFacts]) {
    let wants = |g: &GpuFacts| {
        g.nvlink
            .as_ref()
            .and_then(|n| n.quality.as_ref())
            .is_some_and(|q| q.first.iter().any(LinkCounters::any_counter))
    };
    if !gpus.iter().any(wants) {
        return;
    }
    std::thread::sleep(QUALITY_INTERVAL);
    for (index, d) in devices {
        let Some(g) = gpus.iter_mut().find(|g| g.index == *index && wants(g)) else {
            continue;
        };
        if let Some(q) = g.nvlink.as_mut().and_then(|n| n.quality.as_mut()) {
            q.second = Some(
                q.first
                    .iter()
                    .map(|c| link_counters(nvml, d, c.link))
                    .collect(),
            );
        }
    }
}

/// One link's fields through `nvmlDeviceGetFieldValues` with the link as scope (nvml-wrapper 0.13 sets no
/// scope): each field's own return code is its answer.
fn link_counters(nvml: &Nvml, d: &Device<'_>, link: u32) -> LinkCounters {
    use nvml_wrapper_sys::bindings::{field_id as f, nvmlFieldValue_t};
    const CALL: &str = "nvmlDeviceGetFieldValues";
    let ids = [
        f::NVML_FI_DEV_NVLINK_GET_SPEED,
        f::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
        f::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
        f::NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS,
    ];
    let names = [
        "NVLINK_GET_SPEED",
        "NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS",
        "NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS",
        "NVLINK_COUNT_EFFECTIVE_ERRORS",
    ];
    let lib = nvml.lib();
    let answers: Vec<Answer<u64>> = match &lib.nvmlDeviceGetFieldValues {
        Err(e) => vec![Err(format!("{CALL}: {}", super::innermost_message(e))); ids.len()],
        Ok(_) => {
            let mut values: Vec<nvmlFieldValue_t> = ids
                .iter()
                .map(|&id| {
                    // SAFETY: plain integers and a union of integers; all-zero is a valid value.
                    let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
                    v.fieldId = id;
                    v.scopeId = link;
                    v
                })
                .collect();
            breadcrumb(CALL);
            // SAFETY: the symbol is present (checked above); the handle is live; `values` holds `len` structs.
            let rc = unsafe {
                lib.nvmlDeviceGetFieldValues(d.handle(), values.len() as i32, values.as_mut_ptr())
            };
            match nvml_wrapper::error::nvml_try(rc) {
                Err(e) => vec![Err(text(CALL, e)); ids.len()],
                Ok(()) => values
                    .iter()
                    .zip(names)
                    .map(|(v, name)| field_value(v, &format!("{CALL}({name}, link {link})")))
                    .collect(),
            }
        }
    };
    let mut it = answers.into_iter();
    let mut next = || it.next().unwrap_or_else(|| Err(NOT_READ.to_string()));
    LinkCounters {
        link,
        speed_mbps: next(),
        recoveries: next(),
        recoveries_failed: next(),
        effective_errors: next(),
    }
}

/// A field's own return code, then its value as an unsigned count.
fn field_value(v: &nvml_wrapper_sys::bindings::nvmlFieldValue_t, call: &str) -> Answer<u64> {
    use nvml_wrapper_sys::bindings as b;
    nvml_wrapper::error::nvml_try(v.nvmlReturn).map_err(|e| text(call, e))?;
    // SAFETY: the union member read is the one `valueType` names.
    let value = unsafe {
        match v.valueType {
            b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => u64::from(v.value.uiVal),
            // c_ulong is u64 on both targets this tool builds for, u32 elsewhere.
            #[allow(clippy::unnecessary_cast)]
            b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => v.value.ulVal as u64,
            b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => v.value.ullVal,
            b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT => u64::from(v.value.usVal),
            b::nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG if v.value.sllVal >= 0 => {
                v.value.sllVal as u64
            }
            b::nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT if v.value.siVal >= 0 => {
                v.value.siVal as u64
            }
            other => return Err(format!("{call}: value of type {other} is not a count")),
        }
    };
    Ok(value)
}

/// `NVML_STRUCT_VERSION(name, n)`: the struct's size with the version in the top byte.
fn struct_version<T>(n: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (n << 24)
}

/// `nvmlGpuFabricClique_v1_t` (nvml.h R615): not in nvml-wrapper-sys 0.10.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawFabricClique {
    kind: u8,
    id: u32,
}

/// Entries in v4's clique array (`NVML_GPU_FABRIC_CLIQUE_MAX`).
const FABRIC_CLIQUE_MAX: usize = 64;

/// `nvmlGpuFabricInfo_v4_t` (nvml.h R615): no version word; the call's name carries the version.
#[repr(C)]
struct RawFabricInfoV4 {
    cluster_uuid: [u8; 16],
    status: u32,
    cliques: [RawFabricClique; FABRIC_CLIQUE_MAX],
    num_cliques: u32,
    state: u8,
    health_mask: u32,
    health_summary: u8,
}

type FabricInfoV4Fn = unsafe extern "C" fn(
    nvml_wrapper_sys::bindings::nvmlDevice_t,
    *mut RawFabricInfoV4,
) -> nvml_wrapper_sys::bindings::nvmlReturn_t;

const CALL_V4: &str = "nvmlDeviceGetGpuFabricInfo_v4";

/// `nvmlDeviceGetGpuFabricInfo_v4` (R615+), looked up in the NVML nvml-wrapper already opened (RTLD_NOLOAD:
/// never a second library): `None` on a driver without it or refusing it, so the caller falls back to v3.
fn fabric_info_v4(d: &Device<'_>) -> Option<Answer<FabricInfo>> {
    use libloading::os::unix::{Library as Lib, RTLD_NOW};
    // SAFETY: RTLD_NOLOAD only returns the already-loaded library (no initialisers run again).
    let lib = unsafe { Lib::open(Some("libnvidia-ml.so.1"), RTLD_NOW | libc::RTLD_NOLOAD) }.ok()?;
    // SAFETY: the symbol's C signature is nvml.h's `nvmlReturn_t (nvmlDevice_t, nvmlGpuFabricInfo_v4_t *)`.
    let call = unsafe { lib.get::<FabricInfoV4Fn>(CALL_V4.as_bytes()) }.ok()?;
    // SAFETY: plain integers and bytes; all-zero is a valid value.
    let mut v4: RawFabricInfoV4 = unsafe { std::mem::zeroed() };
    breadcrumb(CALL_V4);
    // SAFETY: the handle is live for `d`'s lifetime; one out-struct of the v4 layout; `lib` outlives the call.
    let rc = unsafe { call(d.handle(), &mut v4) };
    if let Err(e) = nvml_wrapper::error::nvml_try(rc) {
        // Refused for this GPU or this struct: v3 answers the same question the older way.
        return match e {
            NvmlError::NotSupported
            | NvmlError::InvalidArg
            | NvmlError::FunctionNotFound
            | NvmlError::Unknown => None,
            e => Some(Err(text(CALL_V4, e))),
        };
    }
    let cliques: Vec<FabricClique> = v4.cliques[..(v4.num_cliques as usize).min(FABRIC_CLIQUE_MAX)]
        .iter()
        .map(|c| FabricClique {
            kind: c.kind,
            id: c.id,
        })
        .collect();
    Some(Ok(FabricInfo {
        call: CALL_V4.to_string(),
        state: v4.state,
        status: return_name(v4.status).to_string(),
        clique_id: legacy_clique(&cliques),
        cluster_uuid: cluster_hex(v4.cluster_uuid),
        health_mask: Some(v4.health_mask),
        health_summary: Some(v4.health_summary),
        cliques: Some(cliques),
    }))
}

/// What v3 called `cliqueId`: the first unicast-pointer clique's id, else the first clique's, else 0.
fn legacy_clique(cliques: &[FabricClique]) -> u32 {
    cliques
        .iter()
        .find(|c| c.kind == CLIQUE_UNICAST_POINTER)
        .or(cliques.first())
        .map_or(0, |c| c.id)
}

fn cluster_hex(uuid: [u8; 16]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}

/// `nvmlDeviceGetGpuFabricInfo_v4` (clique list) where the driver has it, else `nvmlDeviceGetGpuFabricInfoV`
/// with the v3 struct (health summary), the v2 one where the driver refuses v3, else the v1 call (drivers
/// before R535 lack the V call); none wrapped by nvml-wrapper 0.13. A driver with no fabric call answers
/// FUNCTION_NOT_FOUND.
fn fabric_info(nvml: &Nvml, d: &Device<'_>) -> Answer<FabricInfo> {
    use nvml_wrapper_sys::bindings::{
        nvmlGpuFabricInfo_t, nvmlGpuFabricInfo_v2_t, nvmlGpuFabricInfo_v3_t,
    };
    const CALL_V: &str = "nvmlDeviceGetGpuFabricInfoV";
    const CALL_V1: &str = "nvmlDeviceGetGpuFabricInfo";
    if let Some(answer) = fabric_info_v4(d) {
        return answer;
    }
    let lib = nvml.lib();
    if lib.nvmlDeviceGetGpuFabricInfoV.is_ok() {
        // SAFETY: plain integers and bytes; all-zero is a valid value.
        let mut v3: nvmlGpuFabricInfo_v3_t = unsafe { std::mem::zeroed() };
        v3.version = struct_version::<nvmlGpuFabricInfo_v3_t>(3);
        breadcrumb(CALL_V);
        // SAFETY: the symbol is present (checked above); the handle is live; one out-struct of the newest
        // layout, which the binding's pointer type is.
        let rc = unsafe { lib.nvmlDeviceGetGpuFabricInfoV(d.handle(), &mut v3) };
        if nvml_wrapper::error::nvml_try(rc).is_ok() {
            return Ok(FabricInfo {
                call: format!("{CALL_V}(v3)"),
                state: v3.state,
                status: return_name(v3.status).to_string(),
                clique_id: v3.cliqueId,
                cluster_uuid: cluster_hex(v3.clusterUuid),
                health_mask: Some(v3.healthMask),
                health_summary: Some(v3.healthSummary),
                cliques: None,
            });
        }
        // SAFETY: as above.
        let mut v2: nvmlGpuFabricInfo_v2_t = unsafe { std::mem::zeroed() };
        v2.version = struct_version::<nvmlGpuFabricInfo_v2_t>(2);
        breadcrumb(CALL_V);
        // SAFETY: as above; NVML reads the version word and writes no more than the v2 struct it names.
        let rc = unsafe {
            lib.nvmlDeviceGetGpuFabricInfoV(
                d.handle(),
                (&mut v2 as *mut nvmlGpuFabricInfo_v2_t).cast(),
            )
        };
        nvml_wrapper::error::nvml_try(rc).map_err(|e| text(CALL_V, e))?;
        return Ok(FabricInfo {
            call: format!("{CALL_V}(v2)"),
            state: v2.state,
            status: return_name(v2.status).to_string(),
            clique_id: v2.cliqueId,
            cluster_uuid: cluster_hex(v2.clusterUuid),
            health_mask: Some(v2.healthMask),
            health_summary: None,
            cliques: None,
        });
    }
    if let Err(e) = &lib.nvmlDeviceGetGpuFabricInfo {
        return Err(format!(
            "{CALL_V1}: NVML_ERROR_FUNCTION_NOT_FOUND (this driver has neither {CALL_V} nor {CALL_V1}: {})",
            super::innermost_message(e)
        ));
    }
    // SAFETY: as above.
    let mut v1: nvmlGpuFabricInfo_t = unsafe { std::mem::zeroed() };
    breadcrumb(CALL_V1);
    // SAFETY: the symbol is present (checked above); the handle is live; one out-struct of the v1 layout.
    let rc = unsafe { lib.nvmlDeviceGetGpuFabricInfo(d.handle(), &mut v1) };
    nvml_wrapper::error::nvml_try(rc).map_err(|e| text(CALL_V1, e))?;
    Ok(FabricInfo {
        call: CALL_V1.to_string(),
        state: v1.state,
        status: return_name(v1.status).to_string(),
        clique_id: v1.cliqueId,
        cluster_uuid: cluster_hex(v1.clusterUuid),
        health_mask: None,
        health_summary: None,
        cliques: None,
    })
}

/// `nvmlDeviceGetRemappedRows` is not wrapped by nvml-wrapper 0.13: called through the raw table.
fn remapped_rows(nvml: &Nvml, d: &Device<'_>) -> Answer<RemappedRows> {
    const CALL: &str = "nvmlDeviceGetRemappedRows";
    let lib = nvml.lib();
    if let Err(e) = &lib.nvmlDeviceGetRemappedRows {
        return Err(format!("{CALL}: {}", super::innermost_message(e)));
    }
    let (mut corr, mut unc, mut pending, mut failure) = (0, 0, 0, 0);
    breadcrumb(CALL);
    // SAFETY: the symbol is present (checked above); the handle is live for `d`'s lifetime; four out-ints.
    let status = unsafe {
        lib.nvmlDeviceGetRemappedRows(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure)
    };
    nvml_wrapper::error::nvml_try(status).map_err(|e| text(CALL, e))?;
    Ok(RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failure: failure != 0,
    })
}

/// `nvmlDeviceGetGpuMaxPcieLinkGeneration` (not wrapped by nvml-wrapper 0.13).
fn gpu_max_pcie_gen(nvml: &Nvml, d: &Device<'_>) -> Answer<u32> {
    const CALL: &str = "nvmlDeviceGetGpuMaxPcieLinkGeneration";
    let lib = nvml.lib();
    if let Err(e) = &lib.nvmlDeviceGetGpuMaxPcieLinkGeneration {
        return Err(format!("{CALL}: {}", super::innermost_message(e)));
    }
    let mut gen = 0;
    breadcrumb(CALL);
    // SAFETY: the symbol is present (checked above); the handle is live; one out-int.
    let status = unsafe { lib.nvmlDeviceGetGpuMaxPcieLinkGeneration(d.handle(), &mut gen) };
    nvml_wrapper::error::nvml_try(status).map_err(|e| text(CALL, e))?;
    Ok(gen)
}

/// Current PCIe generation, width and speed of every GPU, read now (called while a copy loop runs).
pub fn sample_links() -> Answer<Vec<LinkSample>> {
    let nvml = open()?;
    let count = ask("nvmlDeviceGetCount_v2", || nvml.device_count())?;
    let mut samples = Vec::new();
    for index in 0..count {
        let d = ask("nvmlDeviceGetHandleByIndex_v2", || {
            nvml.device_by_index(index)
        })?;
        samples.push(LinkSample {
            index,
            pci_bus_id: ask("nvmlDeviceGetPciInfo_v3", || d.pci_info())
                .map(|p| normalize_bus_id(&p.bus_id)),
            gen: ask("nvmlDeviceGetCurrPcieLinkGeneration", || {
                d.current_pcie_link_gen()
            }),
            width: ask("nvmlDeviceGetCurrPcieLinkWidth", || {
                d.current_pcie_link_width()
            }),
            speed_mts: ask("nvmlDeviceGetPcieLinkSpeed", || d.pcie_link_speed()),
        });
    }
    close(nvml);
    Ok(samples)
}

/// NVML's `00000000:17:00.0` → sysfs's `0000:17:00.0`.
pub fn normalize_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => id,
    }
}

fn p2p_name(s: P2pStatus) -> String {
    match s {
        P2pStatus::Ok => P2P_OK,
        P2pStatus::ChipsetNotSupported => "chipset not supported",
        P2pStatus::GpuNotSupported => "GPU not supported",
        P2pStatus::IohTopologyNotSupported => "IOH topology not supported",
        P2pStatus::DisabledByRegkey => "disabled by regkey",
        P2pStatus::NotSupported => "not supported",
        P2pStatus::Unknown => "unknown",
    }
    .to_string()
}

fn topology_label(l: TopologyLevel) -> &'static str {
    match l {
        TopologyLevel::Internal => "internal",
        TopologyLevel::Single => "PIX",
        TopologyLevel::Multiple => "PXB",
        TopologyLevel::HostBridge => "PHB",
        TopologyLevel::Node => "NODE",
        TopologyLevel::System => "SYS",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_id_with_eight_digit_domain_normalizes_to_sysfs_form() {
        assert_eq!(normalize_bus_id("00000000:00:06.0"), "0000:00:06.0");
        assert_eq!(normalize_bus_id("0000:9A:00.0"), "0000:9a:00.0");
    }

    #[test]
    fn absent_library_gives_loader_message_not_panic() {
        let facts = collect();
        if let Some(e) = &facts.nvml_error {
            assert!(facts.gpus.is_empty());
            assert_eq!(e.library, Library::Nvml);
            assert!(
                e.is_not_loaded() || e.call == "nvmlInit_v2",
                "names the library or the call: {e}"
            );
        }
    }

    /// Answers as this build writes them and as older recordings hold them (nvml-wrapper's words only).
    #[test]
    fn error_answers_are_classified_by_code_name_or_words() {
        for (text, want) in [
            ("nvmlDeviceGetName: NVML_ERROR_GPU_IS_LOST (device fell off the bus or has otherwise become inacessible)", Fault::Lost),
            ("nvmlDeviceGetUUID: device fell off the bus or has otherwise become inacessible", Fault::Lost),
            ("nvmlDeviceGetRetiredPages(SBE): the requested operation is not available on the target device", Fault::Unsupported),
            ("nvmlDeviceGetRemappedRows: NVML_ERROR_NOT_SUPPORTED (the requested operation is not available on the target device)", Fault::Unsupported),
            ("nvmlDeviceGetRemappedRows: function symbol failed to load: undefined symbol", Fault::Unsupported),
            // libloading's own text for a symbol an old driver's NVML lacks.
            ("nvmlDeviceGetRemappedRows: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: undefined symbol: nvmlDeviceGetRemappedRows", Fault::Unsupported),
            ("nvmlDeviceGetEccMode: NVML_ERROR_NO_PERMISSION (the current user does not have permission to perform this operation)", Fault::Denied),
            ("nvmlDeviceGetEccMode: an internal driver error occurred", Fault::Failed),
            (NOT_READ, Fault::NotAsked),
        ] {
            assert_eq!(fault(text), want, "{text}");
        }
    }

    #[test]
    fn facts_survive_a_json_round_trip() {
        let facts = NvmlFacts {
            nvml_error: None,
            driver_version: Ok("580.159.04".into()),
            cuda_driver_version: Ok(13000),
            nvml_version: Err("nvmlSystemGetNVMLVersion: not supported".into()),
            device_count: Ok(1),
            gpus: vec![GpuFacts {
                index: 0,
                ..GpuFacts::default()
            }],
            pairs: vec![],
        };
        let json = serde_json::to_string(&facts).unwrap();
        assert_eq!(serde_json::from_str::<NvmlFacts>(&json).unwrap(), facts);
    }

    /// Recordings made before the NVLink answers were kept (with the old `nvlinks_active` count) still load,
    /// and say the NVLink answers were not recorded.
    #[test]
    fn recording_without_nvlink_answers_reads_as_not_recorded() {
        let mut gpu = serde_json::to_value(GpuFacts::default()).unwrap();
        let map = gpu.as_object_mut().unwrap();
        map.remove("nvlink");
        map.insert("nvlinks_active".into(), serde_json::json!({"Ok": 18}));
        let back: GpuFacts = serde_json::from_value(gpu).unwrap();
        assert_eq!(back.nvlink, None);
    }

    /// The version words nvml.h's C layout gives (36 and 40 bytes): a wrong one is refused with
    /// ARGUMENT_VERSION_MISMATCH, or worse, read as another version.
    #[test]
    fn fabric_struct_versions_match_the_c_layout() {
        use nvml_wrapper_sys::bindings::{nvmlGpuFabricInfo_v2_t, nvmlGpuFabricInfo_v3_t};
        assert_eq!(struct_version::<nvmlGpuFabricInfo_v2_t>(2), 0x0200_0024);
        assert_eq!(struct_version::<nvmlGpuFabricInfo_v3_t>(3), 0x0300_0028);
    }

    #[test]
    fn fabric_health_mask_fields_decode_as_nvml_h_defines_them() {
        let info = |mask| FabricInfo {
            call: "nvmlDeviceGetGpuFabricInfoV".into(),
            state: FABRIC_STATE_COMPLETED,
            status: "NVML_SUCCESS".into(),
            clique_id: 0,
            cluster_uuid: "0".repeat(32),
            health_mask: mask,
            health_summary: None,
            cliques: None,
        };
        assert_eq!(info(None).health(), None);
        assert_eq!(info(Some(0)).health(), Some(FabricHealth::default()));
        // Bandwidth degraded, route recovery no, route unhealthy, access-timeout recovery no, no partition.
        let h = info(Some(1 | 2 << 2 | 1 << 4 | 2 << 6 | 4 << 8))
            .health()
            .unwrap();
        assert_eq!(h.degraded_bandwidth, Some(true));
        assert_eq!(h.route_recovery_in_progress, Some(false));
        assert_eq!(h.route_unhealthy, Some(true));
        assert_eq!(h.access_timeout_recovery, Some(false));
        assert_eq!(
            h.incorrect_configuration,
            Some(Some("no partition assigned".into()))
        );
        assert_eq!(
            info(Some(1 << 8)).health().unwrap().incorrect_configuration,
            Some(None)
        );
        // Partition assigned no, global fabric manager disconnected (R590, R615 bits).
        let h = info(Some(2 << 12 | 2 << 14)).health().unwrap();
        assert_eq!(h.partition_assigned, Some(false));
        assert_eq!(h.gfm_connected, Some(false));
        let h = info(Some(1 << 12 | 1 << 14)).health().unwrap();
        assert_eq!(
            (h.partition_assigned, h.gfm_connected),
            (Some(true), Some(true))
        );
    }

    /// Every incorrect-configuration cause is a named failure, including the ones added after nvml.h 12.x and
    /// one no header knows yet.
    #[test]
    fn every_incorrect_configuration_cause_is_named() {
        for (cause, words) in [
            (2, "system GUID"),
            (3, "chassis serial number"),
            (4, "no partition"),
            (5, "insufficient NVLinks"),
            (6, "incompatible GPU firmware"),
            (7, "invalid location"),
            (8, "GPU state invalid"),
            (12, "cause 12"),
        ] {
            let info = FabricInfo {
                health_mask: Some(cause << 8),
                ..fabric_v4(vec![])
            };
            let why = info
                .health()
                .unwrap()
                .incorrect_configuration
                .unwrap()
                .unwrap();
            assert!(why.contains(words), "{cause}: {why}");
        }
    }

    fn fabric_v4(cliques: Vec<FabricClique>) -> FabricInfo {
        FabricInfo {
            call: CALL_V4.into(),
            state: FABRIC_STATE_COMPLETED,
            status: "NVML_SUCCESS".into(),
            clique_id: legacy_clique(&cliques),
            cluster_uuid: "0".repeat(32),
            health_mask: Some(0),
            health_summary: Some(0),
            cliques: Some(cliques),
        }
    }

    /// nvml.h's C layout of `nvmlGpuFabricInfo_v4_t`: 16 + 4 + 64 × 8 + 4 + 1 (+3) + 4 + 1 (+3) bytes.
    #[test]
    fn fabric_v4_struct_matches_the_c_layout() {
        assert_eq!(std::mem::size_of::<RawFabricClique>(), 8);
        assert_eq!(std::mem::size_of::<RawFabricInfoV4>(), 548);
        assert_eq!(std::mem::offset_of!(RawFabricInfoV4, num_cliques), 532);
        assert_eq!(std::mem::offset_of!(RawFabricInfoV4, health_mask), 540);
    }

    /// v3's `cliqueId` is v4's first unicast-pointer clique; a v4 answer without one still names a clique.
    #[test]
    fn v4_cliques_give_the_legacy_clique_id() {
        let c = |kind, id| FabricClique { kind, id };
        assert_eq!(legacy_clique(&[c(0, 32766), c(1, 7), c(2, 9)]), 32766);
        assert_eq!(legacy_clique(&[c(1, 7), c(2, 9)]), 7);
        assert_eq!(legacy_clique(&[]), 0);
        assert!(!fabric_v4(vec![]).names_a_domain());
        assert!(fabric_v4(vec![c(0, 4026)]).names_a_domain());
    }

    /// Recordings made before v4 (no `cliques`) load with the list absent, not empty.
    #[test]
    fn recording_before_v4_has_no_clique_list() {
        let mut v = serde_json::to_value(fabric_v4(vec![])).unwrap();
        v.as_object_mut().unwrap().remove("cliques");
        let back: FabricInfo = serde_json::from_value(v).unwrap();
        assert_eq!(back.cliques, None);
    }
}
