//! `gpu.nvlink`: each GPU's NVLink links and its NVLink-fabric registration as NVML reports them: an inactive
//! link, fewer active links than the profile or the GPU's peers of the same model, a fabric manager that has not
//! registered the GPU, or a fabric that reports itself degraded.

use std::collections::BTreeMap;

use crate::dynlib::nvml::{
    self, Answer, FabricInfo, GpuFacts, NvmlFacts, FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY,
    FABRIC_HEALTH_SUMMARY_UNHEALTHY, FABRIC_STATE_COMPLETED, FABRIC_STATE_IN_PROGRESS,
    FABRIC_STATE_NOT_STARTED, FABRIC_STATE_NOT_SUPPORTED,
};
use crate::probe::{
    CheckResult, Context, Explain, FindingCode, Findings, Kind, Library, Measurement, Need, Probe,
    ProbeMeta, Remedy, Status,
};
use crate::probes::shared::facts::NVML;
use crate::probes::shared::gpu::{judge_nvml, lost_fix, shown, subject};
use crate::rules::nvlink_domain;

pub struct GpuNvlink;

const ID: &str = "gpu.nvlink";

const FIX_LINK: &str = "see which links are down with `nvidia-smi nvlink --status -i <gpu>`; reset the GPU \
(`nvidia-smi -r -i <gpu>`) or power-cycle the node; a link that stays down needs its NVLink bridge reseated (PCIe \
cards) or the baseboard serviced (HGX)";
const FIX_PROFILE: &str = "use the profile of this node type";
const FIX_NOT_STARTED: &str = "start the fabric manager, the same version as the driver: `systemctl enable --now \
nvidia-fabricmanager`; on GB200 NVL72 compute trays check `nvidia-imex` and the NVLink switch trays' NMX controller";
const FIX_IN_PROGRESS: &str =
    "the fabric manager is still registering the GPU: re-run once `nvidia-smi -q` shows \
Fabric State Completed (seconds to minutes after boot or a GPU reset)";
const FIX_STATUS: &str = "read the fabric manager's log (`journalctl -u nvidia-fabricmanager`, \
/var/log/fabricmanager.log); restart it and reset the GPUs";
const FIX_HEALTH: &str =
    "`nvidia-smi -q` (Fabric → Health) and `nvidia-smi nvlink --status` show what is degraded; \
reset the GPUs, then have the NVSwitch baseboard or NVLink switch trays serviced";
const FIX_RECOVERY: &str = "the fabric is recovering on its own: re-run in a minute";
const FIX_DOMAIN: &str = "`nvidia-smi -q` (Fabric: State Completed, Status Success, a CliqueId and ClusterUUID) \
must place every GPU of the tray in the domain: check the NVLink switch trays' NMX controller and that this \
tray is in a partition, then reset the GPUs (`nvidia-smi -r`) or reboot the tray; on a board meant to run \
standalone, use a profile without `expect.nvlink_domain`";
const FIX_PARTITION: &str =
    "assign the tray's GPUs to an NVLink partition on the NMX controller (`nmx-c` / \
NetQ partition commands), then reset the GPUs";
const FIX_GFM: &str = "restore the global fabric manager: check the NMX controller on the NVLink switch trays \
(NVL72) or `systemctl status nvidia-fabricmanager` (NVSwitch systems), and its connection to this tray";

const NOT_RECORDED: FindingCode = FindingCode {
    code: "GPU101",
    title: "the recording holds no NVLink and fabric answers",
    explanation: "A skip: the recorded NVML answers predate the NVLink and fabric questions, so nothing is judged. Record the tree again.",
    step: None,
};
const NOT_ASKED: FindingCode = FindingCode {
    code: "GPU102",
    title: "a GPU could not be asked about NVLink (its handle failed)",
    explanation: "NVML could not open the GPU, so its links were not asked: the GPU is lost or in a bad state. Reset it.",
    step: Some(Remedy::ResetGpu),
};
const NVML_ERRORS: FindingCode = FindingCode {
    code: "GPU103",
    title: "NVML's NVLink calls fail on a GPU",
    explanation:
        "NVML's link calls about this GPU fail: reset the GPU; check dmesg for Xid errors.",
    step: Some(Remedy::ResetGpu),
};
const LINKS_INACTIVE: FindingCode = FindingCode {
    code: "GPU104",
    title: "NVLink links are inactive",
    explanation: "Links the GPU supports are down: `nvidia-smi nvlink --status -i <gpu>` shows which. Reset the GPU; links that stay down point at the baseboard or the NVSwitch tray (service).",
    step: Some(Remedy::ResetGpu),
};
const TOO_FEW_LINKS: FindingCode = FindingCode {
    code: "GPU105",
    title: "fewer NVLink links than the profile expects",
    explanation: "The GPU supports fewer links than `expect.nvlinks_per_gpu`: a baseboard that does not match the profile, or links disabled in firmware.",
    step: Some(Remedy::ServiceRma),
};
const TOO_MANY_LINKS: FindingCode = FindingCode {
    code: "GPU106",
    title: "more active NVLink links than the profile expects",
    explanation: "More links are active than the profile says: use the profile of this node type.",
    step: Some(Remedy::Reconfigure),
};
const FEWER_THAN_PEERS: FindingCode = FindingCode {
    code: "GPU107",
    title: "fewer active NVLink links than other GPUs of the same model",
    explanation: "Without a profile count, a GPU with fewer active links than its peers of the same model lost some: reset it; service it if they stay down.",
    step: Some(Remedy::ResetGpu),
};
const FABRIC_UNREPORTED: FindingCode = FindingCode {
    code: "GPU108",
    title: "the NVLink fabric is not reported, yet the node is in an NVLink domain",
    explanation: "The node is in an NVLink domain (NVL72 and the like) but the driver reports no fabric state for the GPU: active links alone do not prove the fabric. Use a driver that reports it, and check `nvidia-smi -q`.",
    step: Some(Remedy::Reconfigure),
};
const NO_NVLINK_IN_DOMAIN: FindingCode = FindingCode {
    code: "GPU109",
    title: "no NVLink and no fabric on a GPU, yet the node is in an NVLink domain",
    explanation: "NVML reports neither links nor fabric for the GPU while the node is in an NVLink domain: the GPU is cut off from the domain.",
    step: Some(Remedy::ServiceRma),
};
const NO_NVLINK_EXPECTED: FindingCode = FindingCode {
    code: "GPU110",
    title: "no NVLink on a GPU while the profile expects active links",
    explanation: "NVML answers NOT_SUPPORTED for every link while the profile expects them: a PCIe GPU, or a VM given the GPU without its NVLinks (ask for the instance type that passes NVLink through).",
    step: Some(Remedy::ServiceRma),
};
const NO_NVLINK_PEERS: FindingCode = FindingCode {
    code: "GPU111",
    title: "no NVLink on a GPU while other GPUs of its model have them",
    explanation: "Without a profile count: the GPU's peers of the same model have active links and it has none.",
    step: Some(Remedy::ResetGpu),
};
const NO_NVLINK: FindingCode = FindingCode {
    code: "GPU112",
    title: "no NVLink on this GPU",
    explanation: "A skip: NVML answers NOT_SUPPORTED for every link and the GPU is in no NVLink fabric (a PCIe GPU, or a VM without NVLink).",
    step: None,
};
const FABRIC_NOT_STARTED: FindingCode = FindingCode {
    code: "GPU113",
    title: "NVLink fabric registration not started",
    explanation: "The fabric manager is not running or has not seen the GPU: start nvidia-fabricmanager (the same version as the driver).",
    step: Some(Remedy::RestartService),
};
const FABRIC_IN_PROGRESS: FindingCode = FindingCode {
    code: "GPU114",
    title: "NVLink fabric registration in progress: the GPU is not ready for CUDA yet",
    explanation: "Registration is still running: wait and run again; if it stays in progress, restart the fabric manager.",
    step: Some(Remedy::RestartService),
};
const FABRIC_FAILED: FindingCode = FindingCode {
    code: "GPU115",
    title: "NVLink fabric registration completed with an error",
    explanation: "The fabric manager finished registering the GPU with an error status: read its log (`journalctl -u nvidia-fabricmanager`) and restart it.",
    step: Some(Remedy::RestartService),
};
const FABRIC_STATE_UNKNOWN: FindingCode = FindingCode {
    code: "GPU116",
    title: "the NVLink fabric state is not one this build knows",
    explanation: "A warning: a newer driver reports a fabric state this build cannot judge.",
    step: None,
};
const FABRIC_UNHEALTHY: FindingCode = FindingCode {
    code: "GPU117",
    title: "the NVLink fabric reports itself unhealthy or degraded",
    explanation: "The fabric's health summary is unhealthy or limited, its bandwidth degraded, a route unhealthy or its configuration incorrect: reset the GPU; if it persists, the NVSwitch trays or cables need service.",
    step: Some(Remedy::ResetGpu),
};
const NO_PARTITION: FindingCode = FindingCode {
    code: "GPU118",
    title: "the NVLink fabric assigned the GPU no partition",
    explanation: "The GPU is in no NVLink partition: assign it one through the fabric manager or NMX controller.",
    step: Some(Remedy::Reconfigure),
};
const GFM_DISCONNECTED: FindingCode = FindingCode {
    code: "GPU119",
    title: "the NVLink global fabric manager is disconnected",
    explanation: "The NMX controller or fabric manager that routes the domain is unreachable: restore it on the NVLink switch trays.",
    step: Some(Remedy::RestartService),
};
const FABRIC_RECOVERING: FindingCode = FindingCode {
    code: "GPU120",
    title: "NVLink fabric recovery in progress",
    explanation:
        "The fabric is recovering a route or an access timeout on its own: run again in a minute.",
    step: Some(Remedy::Reconfigure),
};
const NOT_IN_DOMAIN: FindingCode = FindingCode {
    code: "GPU121",
    title: "the GPU's fabric registration shares no memory across the NVLink domain",
    explanation: "Registration completed with clique 0 or a zero cluster UUID while the node is in an NVLink domain: the GPU shares no memory across the domain. Check `nvidia-smi -q` and the fabric manager / IMEX.",
    step: Some(Remedy::RestartService),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "NVLink per GPU: links active, NVLink fabric registered and healthy",
    needs: &[Need::Gpu],
    kind: Kind::Library,
    libraries: &[Library::Nvml],
    facts: &[&NVML],
    explain: Explain {
        reads: "NVML per GPU: nvmlDeviceGetNvLinkState for links 0..17 (NVML_NVLINK_MAX_LINKS), \
                nvmlDeviceGetGpuFabricInfo_v4 (R615+: state, status, clique list, cluster UUID, health mask and \
                summary), else nvmlDeviceGetGpuFabricInfoV (v3; v2 where the driver refuses v3) or \
                nvmlDeviceGetGpuFabricInfo (v1) on drivers without it; whether the node is in a multi-node NVLink \
                domain: the fabric answers, the GPU model, /etc/nvidia-imex/config.cfg and its node list, \
                ComputeDomain CDI specs in /var/run/cdi and /etc/cdi, expect.nvlink_domain",
        why: "An NVLink down on one GPU, or an NVSwitch fabric the fabric manager never registered, leaves the GPU \
              on the bus and in nvidia-smi: NCCL then runs its rings over fewer links, or CUDA refuses to start \
              on the GPU ('system not yet initialized'), and the job fails or runs slow on that node only.",
        fixes: &[
            ("a link inactive, or fewer active than the profile or the GPU's peers", FIX_LINK),
            ("fabric registration not started (fabric manager not running)", FIX_NOT_STARTED),
            ("fabric registration in progress", FIX_IN_PROGRESS),
            ("fabric registration completed with an error", FIX_STATUS),
            ("fabric health: bandwidth degraded, route unhealthy, configuration incorrect", FIX_HEALTH),
            ("in an NVLink domain: clique 0, zero cluster UUID, or fabric not supported", FIX_DOMAIN),
            ("no partition assigned", FIX_PARTITION),
            ("global fabric manager disconnected", FIX_GFM),
            ("NVML errors on a GPU", "reset the GPU (`nvidia-smi -r -i <gpu>`) or reboot; RMA if it recurs"),
        ],
    },
    findings: &[
        &NOT_RECORDED,
        &NOT_ASKED,
        &NVML_ERRORS,
        &LINKS_INACTIVE,
        &TOO_FEW_LINKS,
        &TOO_MANY_LINKS,
        &FEWER_THAN_PEERS,
        &FABRIC_UNREPORTED,
        &NO_NVLINK_IN_DOMAIN,
        &NO_NVLINK_EXPECTED,
        &NO_NVLINK_PEERS,
        &NO_NVLINK,
        &FABRIC_NOT_STARTED,
        &FABRIC_IN_PROGRESS,
        &FABRIC_FAILED,
        &FABRIC_STATE_UNKNOWN,
        &FABRIC_UNHEALTHY,
        &NO_PARTITION,
        &GFM_DISCONNECTED,
        &FABRIC_RECOVERING,
        &NOT_IN_DOMAIN,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GpuNvlink {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        judge_nvml(cx, ID, |facts, replayed| {
            let expect = &cx.profile.expect;
            CheckResult::or_read_error(
                ID,
                nvlink_domain::evidence(facts, expect.nvlink_domain, cx.host).map(|domain| {
                    judge(facts, expect.nvlinks_per_gpu, domain.as_deref(), replayed)
                }),
            )
        })
    }
}

/// One GPU's link answers, sorted.
#[derive(Debug, Default)]
struct Links {
    active: Vec<u32>,
    inactive: Vec<u32>,
    /// NOT_SUPPORTED, or INVALID_ARGUMENT past the GPU's last link: the GPU has no such link.
    absent: Vec<u32>,
    /// Errors a healthy GPU does not answer (GPU_IS_LOST, UNKNOWN, ...).
    failed: Vec<String>,
    denied: Vec<String>,
}

impl Links {
    fn of(answers: &[Answer<bool>]) -> Links {
        let mut l = Links::default();
        for (link, a) in (0u32..).zip(answers) {
            match a {
                Ok(true) => l.active.push(link),
                Ok(false) => l.inactive.push(link),
                Err(e) if e.contains("NVML_ERROR_INVALID_ARGUMENT") => l.absent.push(link),
                Err(e) => match nvml::fault(e) {
                    nvml::Fault::Unsupported => l.absent.push(link),
                    nvml::Fault::Denied => l.denied.push(e.clone()),
                    nvml::Fault::Lost | nvml::Fault::Failed | nvml::Fault::NotAsked => {
                        l.failed.push(e.clone())
                    }
                },
            }
        }
        l
    }

    fn supported(&self) -> usize {
        self.active.len() + self.inactive.len()
    }
}

/// The fabric answers a GPU without a fabric gives: state NOT_SUPPORTED, or the call itself unsupported.
fn no_fabric(fabric: &Answer<FabricInfo>) -> bool {
    match fabric {
        Ok(f) => f.state == FABRIC_STATE_NOT_SUPPORTED,
        Err(e) => nvml::fault(e) == nvml::Fault::Unsupported,
    }
}

/// `domain`: why the node is taken to be in a multi-node NVLink domain (`nvlink_domain::evidence`), where it is.
pub fn judge(
    facts: &NvmlFacts,
    expect_per_gpu: Option<u32>,
    domain: Option<&str>,
    replayed: bool,
) -> Vec<CheckResult> {
    if facts.gpus.iter().all(|g| g.nvlink.is_none()) {
        return vec![CheckResult::skip(
            ID,
            "the recorded NVML answers predate NVLink and fabric answers: not judged",
        )
        .code(&NOT_RECORDED)];
    }
    // The most links any GPU of a model has active: a GPU of the same model with fewer lost some.
    let mut peers: BTreeMap<&str, usize> = BTreeMap::new();
    for g in &facts.gpus {
        if let (Ok(name), Some(n)) = (&g.name, &g.nvlink) {
            let active = Links::of(&n.links).active.len();
            let most = peers.entry(name.as_str()).or_default();
            *most = (*most).max(active);
        }
    }
    facts
        .gpus
        .iter()
        .map(|g| {
            let peer_most = g
                .name
                .as_ref()
                .ok()
                .and_then(|n| peers.get(n.as_str()))
                .copied();
            judge_gpu(g, expect_per_gpu, peer_most.unwrap_or(0), domain, replayed)
                .subject(subject(g))
        })
        .collect()
}

fn judge_gpu(
    g: &GpuFacts,
    expect: Option<u32>,
    peer_most: usize,
    domain: Option<&str>,
    replayed: bool,
) -> CheckResult {
    let Some(facts) = &g.nvlink else {
        return CheckResult::skip(ID, "NVLink and fabric answers not in this recording")
            .code(&NOT_RECORDED);
    };
    if facts.links.is_empty() {
        // The handle failed, so nothing was asked; its error is the name's answer.
        let why = shown(&g.name);
        let mut f = Findings::default();
        match &g.name {
            Err(e) if matches!(nvml::fault(e), nvml::Fault::Denied) => f.unread("NVLink state", e),
            _ => f
                .coded(&NOT_ASKED)
                .fail(format!("not asked about NVLink ({why})"), lost_fix(g.index)),
        }
        return f.result(ID, format!("GPU {}", g.index));
    }
    let links = Links::of(&facts.links);
    let fabric = &facts.fabric;
    let fabric_error = fabric.as_ref().err().filter(|e| {
        !matches!(
            nvml::fault(e),
            nvml::Fault::Unsupported | nvml::Fault::Denied
        )
    });
    if links.supported() == 0
        && links.failed.is_empty()
        && links.denied.is_empty()
        && no_fabric(fabric)
    {
        return judge_no_nvlink(g, expect, peer_most, domain, &links, fabric);
    }

    let mut f = Findings::default();
    let mut failed = links.failed.clone();
    failed.extend(fabric_error.cloned());
    if !failed.is_empty() {
        f.coded(&NVML_ERRORS).fail(
            format!("NVML errors on GPU {}: {}", g.index, failed.join("; ")),
            lost_fix(g.index),
        );
    }
    for e in links.denied.iter().chain(
        fabric
            .as_ref()
            .err()
            .filter(|e| nvml::fault(e) == nvml::Fault::Denied),
    ) {
        f.unread("an NVLink answer", e);
    }
    let active = links.active.len();
    if !links.inactive.is_empty() {
        f.coded(&LINKS_INACTIVE).fail(
            format!(
                "NVLink {} inactive ({active} of {} links active)",
                link_list(&links.inactive),
                links.supported()
            ),
            FIX_LINK,
        );
    }
    // Counts are judged only on a full set of answers: a link that answered an error is reported above.
    let counted = links.failed.is_empty() && links.denied.is_empty();
    match expect {
        Some(want) if counted && links.supported() < want as usize => {
            let missing: Vec<u32> = links.absent.iter().copied().filter(|&l| l < want).collect();
            f.coded(&TOO_FEW_LINKS).fail(
                format!(
                    "{} NVLink links on this GPU, the profile expects {want} active (link {} not supported)",
                    links.supported(),
                    link_list(&missing)
                ),
                FIX_LINK,
            )
        }
        Some(want) if active > want as usize => f.coded(&TOO_MANY_LINKS).warn(
            format!("{active} active NVLink links, more than the profile's {want}"),
            FIX_PROFILE,
        ),
        // Links missing without an expectation: the GPU's peers of the same model say how many there are.
        None if counted && links.inactive.is_empty() && active < peer_most => {
            f.coded(&FEWER_THAN_PEERS).fail(
                format!("{active} active NVLink links, other GPUs of this model have {peer_most}"),
                FIX_LINK,
            )
        }
        _ => {}
    }
    match fabric {
        Ok(info) => judge_fabric(info, domain, &mut f),
        // Link state alone never proves the fabric: ALI trains links whether or not the fabric is up.
        Err(e) if nvml::fault(e) == nvml::Fault::Unsupported => {
            if let Some(why) = domain {
                f.coded(&FABRIC_UNREPORTED).fail(
                    format!("NVLink fabric not reported by this driver, yet the node is in an NVLink domain ({why}): active links alone do not prove the fabric"),
                    FIX_DOMAIN,
                )
            }
        }
        Err(_) => {}
    }
    let summary = format!(
        "GPU {}, {active} of {} NVLink links active, fabric {}",
        g.index,
        links.supported(),
        fabric_summary(fabric)
    );
    evidence(f.result(ID, summary), &links, fabric)
        .measure(Measurement::new("nvlinks_active", active as f64, "links").replayed(replayed))
}

/// Every link NOT_SUPPORTED and no fabric: a GPU without NVLink, unless the profile or the GPU's peers say it
/// has some.
fn judge_no_nvlink(
    g: &GpuFacts,
    expect: Option<u32>,
    peer_most: usize,
    domain: Option<&str>,
    links: &Links,
    fabric: &Answer<FabricInfo>,
) -> CheckResult {
    let mut f = Findings::default();
    if let Some(why) = domain {
        f.coded(&NO_NVLINK_IN_DOMAIN).fail(
            format!("NVML reports no NVLink and no fabric on this GPU, yet the node is in an NVLink domain ({why})"),
            FIX_DOMAIN,
        );
    }
    match expect {
        Some(want @ 1..) => f.coded(&NO_NVLINK_EXPECTED).fail(
            format!("NVML reports no NVLink on this GPU, the profile expects {want} active links"),
            format!("{FIX_LINK}; on a VM, ask for the instance type that passes NVLink through"),
        ),
        // Without a profile saying so, a bridged pair beside an unbridged card of the same model may be meant.
        _ if peer_most > 0 => f.coded(&NO_NVLINK_PEERS).warn(
            format!("NVML reports no NVLink on this GPU, other GPUs of this model have {peer_most} active"),
            FIX_LINK,
        ),
        _ => {}
    }
    let r = if f.status() == Status::Pass {
        CheckResult::skip(
            ID,
            "no NVLink on this GPU: NVML answers NOT_SUPPORTED for every link and the GPU is in no NVLink \
             fabric (a PCIe GPU, or a VM given the GPU without its NVLinks)",
        ).code(&NO_NVLINK)
    } else {
        f.result(ID, format!("GPU {}", g.index))
    };
    evidence(r, links, fabric)
}

fn judge_fabric(info: &FabricInfo, domain: Option<&str>, f: &mut Findings) {
    match info.state {
        FABRIC_STATE_NOT_SUPPORTED => {
            if let Some(why) = domain {
                f.coded(&FABRIC_UNREPORTED).fail(
                    format!("NVLink fabric not supported on this GPU, yet the node is in an NVLink domain ({why}): active links alone do not prove the fabric"),
                    FIX_DOMAIN,
                );
            }
            return;
        }
        FABRIC_STATE_NOT_STARTED => {
            return f.coded(&FABRIC_NOT_STARTED).fail(
                "NVLink fabric registration not started: the fabric manager is not running or has not seen the GPU",
                FIX_NOT_STARTED,
            )
        }
        FABRIC_STATE_IN_PROGRESS => {
            return f.coded(&FABRIC_IN_PROGRESS).fail(
                "NVLink fabric registration in progress: the GPU is not ready for CUDA yet",
                FIX_IN_PROGRESS,
            )
        }
        FABRIC_STATE_COMPLETED if info.status != "NVML_SUCCESS" => {
            return f.coded(&FABRIC_FAILED).fail(
                format!("NVLink fabric registration completed with {}", info.status),
                FIX_STATUS,
            )
        }
        FABRIC_STATE_COMPLETED => {}
        other => {
            return f.coded(&FABRIC_STATE_UNKNOWN).warn(
                format!("NVLink fabric state {other} is not one this build knows"),
                "",
            )
        }
    }
    if let Some(why) = domain {
        judge_domain_membership(info, why, f);
    }
    if let Some(s @ (FABRIC_HEALTH_SUMMARY_UNHEALTHY | FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY)) =
        info.health_summary
    {
        let name = info.health_summary_name().unwrap_or_else(|| s.to_string());
        f.coded(&FABRIC_UNHEALTHY)
            .fail(format!("NVLink fabric health summary: {name}"), FIX_HEALTH);
    }
    let Some(h) = info.health() else { return };
    if h.degraded_bandwidth == Some(true) {
        f.coded(&FABRIC_UNHEALTHY)
            .fail("NVLink fabric bandwidth degraded", FIX_HEALTH);
    }
    if h.route_unhealthy == Some(true) {
        f.coded(&FABRIC_UNHEALTHY)
            .fail("NVLink fabric route unhealthy", FIX_HEALTH);
    }
    if let Some(Some(why)) = &h.incorrect_configuration {
        f.coded(&FABRIC_UNHEALTHY).fail(
            format!("NVLink fabric configuration incorrect: {why}"),
            FIX_HEALTH,
        );
    }
    if h.partition_assigned == Some(false) {
        f.coded(&NO_PARTITION)
            .fail("NVLink fabric assigned the GPU no partition", FIX_PARTITION);
    }
    if h.gfm_connected == Some(false) {
        f.coded(&GFM_DISCONNECTED).fail(
            "NVLink global fabric manager disconnected (the NMX controller or fabric manager that routes the domain)",
            FIX_GFM,
        );
    }
    if h.route_recovery_in_progress == Some(true) {
        f.coded(&FABRIC_RECOVERING)
            .warn("NVLink fabric route recovery in progress", FIX_RECOVERY);
    }
    if h.access_timeout_recovery == Some(true) {
        f.coded(&FABRIC_RECOVERING).warn(
            "NVLink fabric access-timeout recovery in progress",
            FIX_RECOVERY,
        );
    }
}

/// Inside a domain, a completed registration must place the GPU in a clique of a cluster (Azure/azhpc-images#506:
/// clique 0 and a zero UUID passed a grep for `N/A`).
fn judge_domain_membership(info: &FabricInfo, why: &str, f: &mut Findings) {
    let mut missing = Vec::new();
    if info.clique_id == 0 {
        missing.push(match &info.cliques {
            Some(c) if c.is_empty() => "no clique".to_string(),
            _ => "clique 0".to_string(),
        });
    }
    if info.zero_cluster() {
        missing.push("a zero cluster UUID".to_string());
    }
    if !missing.is_empty() {
        f.coded(&NOT_IN_DOMAIN).fail(
            format!(
                "NVLink fabric registration completed with {}, yet the node is in an NVLink domain ({why}): the GPU \
                 shares no memory across the domain",
                missing.join(" and ")
            ),
            FIX_DOMAIN,
        );
    }
}

fn fabric_summary(fabric: &Answer<FabricInfo>) -> String {
    match fabric {
        Ok(info) if info.state == FABRIC_STATE_COMPLETED && info.status != "NVML_SUCCESS" => {
            format!("completed ({})", info.status)
        }
        Ok(info) => info.state_name(),
        Err(e) if nvml::fault(e) == nvml::Fault::Unsupported => "not reported".into(),
        Err(_) => "not read".into(),
    }
}

fn evidence(r: CheckResult, links: &Links, fabric: &Answer<FabricInfo>) -> CheckResult {
    let mut states = Vec::new();
    for (what, list) in [
        ("active", &links.active),
        ("inactive", &links.inactive),
        ("no such link", &links.absent),
    ] {
        if !list.is_empty() {
            states.push(format!("{what} {}", link_list(list)));
        }
    }
    let mut r = r.evidence("nvmlDeviceGetNvLinkState", states.join("; "));
    for e in links.failed.iter().chain(&links.denied) {
        r = r.evidence("nvmlDeviceGetNvLinkState error", e);
    }
    match fabric {
        Ok(info) => {
            let mut text = format!(
                "state {} ({}), status {}, clique {}, cluster {}",
                info.state,
                info.state_name(),
                info.status,
                info.clique_id,
                info.cluster_uuid
            );
            if let Some(mask) = info.health_mask {
                text.push_str(&format!(", health mask {mask:#x}"));
            }
            if let Some(summary) = info.health_summary_name() {
                text.push_str(&format!(", health summary {summary}"));
            }
            if let Some(cliques) = &info.cliques {
                let listed: Vec<String> = cliques
                    .iter()
                    .map(|c| format!("{} {}", c.kind_name(), c.id))
                    .collect();
                text.push_str(&format!(", cliques [{}]", listed.join(", ")));
            }
            r.evidence(&info.call, text)
        }
        Err(e) => r.evidence("nvmlDeviceGetGpuFabricInfo", format!("<{e}>")),
    }
}

/// `0-5, 7, 9-17`: link indexes as ranges.
fn link_list(links: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < links.len() {
        let start = links[i];
        let mut end = start;
        while i + 1 < links.len() && links[i + 1] == end + 1 {
            i += 1;
            end = links[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_SUPPORTED: &str =
        "nvmlDeviceGetNvLinkState(link 0): NVML_ERROR_NOT_SUPPORTED (the requested \
                                 operation is not available on the target device)";
    /// All but the health mask's "not supported" fields: bandwidth full, no route recovery, route healthy, no
    /// access-timeout recovery, configuration correct.
    const HEALTHY_MASK: u32 = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8;

    fn fabric(state: u8, status: &str, mask: Option<u32>) -> Answer<FabricInfo> {
        Ok(FabricInfo {
            call: if mask.is_some() {
                "nvmlDeviceGetGpuFabricInfoV(v2)".into()
            } else {
                "nvmlDeviceGetGpuFabricInfo".into()
            },
            state,
            status: status.into(),
            clique_id: 0,
            cluster_uuid: "0".repeat(32),
            health_mask: mask,
            health_summary: None,
            cliques: None,
        })
    }

    fn gpu(index: u32, links: Vec<Answer<bool>>, fabric: Answer<FabricInfo>) -> GpuFacts {
        GpuFacts {
            index,
            name: Ok("NVIDIA H100 80GB HBM3".into()),
            pci_bus_id: Ok(format!("0000:{:02x}:00.0", 0x18 + index)),
            nvlink: Some(nvml::NvLinkFacts {
                links,
                fabric,
                quality: None,
            }),
            ..GpuFacts::default()
        }
    }

    fn active(n: usize) -> Vec<Answer<bool>> {
        let mut links = vec![Ok(true); n];
        links.extend((n..18).map(|_| Err(NOT_SUPPORTED.to_string())));
        links
    }

    fn hgx_gpu(index: u32) -> GpuFacts {
        gpu(
            index,
            active(18),
            fabric(3, "NVML_SUCCESS", Some(HEALTHY_MASK)),
        )
    }

    fn node(gpus: Vec<GpuFacts>) -> NvmlFacts {
        NvmlFacts {
            nvml_error: None,
            driver_version: Ok("580.159.04".into()),
            cuda_driver_version: Ok(13000),
            nvml_version: Ok("13.580.159.04".into()),
            device_count: Ok(gpus.len() as u32),
            gpus,
            pairs: vec![],
        }
    }

    fn statuses(facts: &NvmlFacts, expect: Option<u32>) -> Vec<Status> {
        judge(facts, expect, None, false)
            .iter()
            .map(|r| r.status)
            .collect()
    }

    #[test]
    fn hgx_with_every_link_active_and_fabric_completed_passes() {
        let facts = node((0..8).map(hgx_gpu).collect());
        for expect in [None, Some(18)] {
            let results = judge(&facts, expect, None, false);
            assert!(
                results.iter().all(|r| r.status == Status::Pass),
                "{results:?}"
            );
            assert_eq!(
                results[0].summary,
                "GPU 0, 18 of 18 NVLink links active, fabric completed"
            );
        }
    }

    /// The H200 of session 5 (testdata/device/h200/session-2026-12-02-s5/nvlink): one GPU in a VM, every link
    /// NOT_SUPPORTED, fabric info SUCCESS with state 0.
    #[test]
    fn gpu_without_nvlink_skips_and_never_passes() {
        let links = (0..18)
            .map(|_| Err(NOT_SUPPORTED.to_string()))
            .collect::<Vec<_>>();
        for fabric in [
            fabric(0, "NVML_SUCCESS", Some(0)),
            Err("nvmlDeviceGetGpuFabricInfoV: NVML_ERROR_NOT_SUPPORTED (the requested operation is not available on the target device)".into()),
            Err("nvmlDeviceGetGpuFabricInfo: NVML_ERROR_FUNCTION_NOT_FOUND (this driver has neither ...)".into()),
        ] {
            let facts = node(vec![gpu(0, links.clone(), fabric)]);
            let r = &judge(&facts, None, None, false)[0];
            assert_eq!(r.status, Status::Skip, "{}", r.summary);
            assert!(r.summary.contains("no NVLink"), "{}", r.summary);
            // A profile that expects NVLinks fails it instead.
            assert_eq!(statuses(&facts, Some(18)), [Status::Fail]);
        }
    }

    #[test]
    fn inactive_link_fails_naming_the_links() {
        for down in [vec![0], vec![5, 6, 7], vec![17]] {
            let mut g = hgx_gpu(3);
            let links = &mut g.nvlink.as_mut().unwrap().links;
            for &l in &down {
                links[l] = Ok(false);
            }
            let facts = node(vec![hgx_gpu(0), g]);
            let results = judge(&facts, None, None, false);
            assert_eq!(results[0].status, Status::Pass);
            assert_eq!(results[1].status, Status::Fail, "{}", results[1].summary);
            assert!(
                results[1].summary.contains(&format!(
                    "NVLink {} inactive",
                    link_list(&down.iter().map(|&l| l as u32).collect::<Vec<_>>())
                )),
                "{}",
                results[1].summary
            );
            assert_eq!(results[1].subject.as_deref(), Some("0000:1b:00.0"));
            assert!(results[1]
                .remediation
                .as_deref()
                .unwrap()
                .contains("nvidia-smi nvlink --status"));
        }
    }

    #[test]
    fn fewer_links_than_peers_or_profile_fail() {
        // Link 17 not reported at all on one GPU: no inactive link, but one fewer than its peers.
        let short = gpu(1, active(17), fabric(3, "NVML_SUCCESS", Some(HEALTHY_MASK)));
        let facts = node(vec![hgx_gpu(0), short.clone()]);
        assert_eq!(statuses(&facts, None), [Status::Pass, Status::Fail]);
        assert_eq!(statuses(&facts, Some(18)), [Status::Pass, Status::Fail]);
        let r = &judge(&facts, Some(18), None, false)[1];
        assert!(
            r.summary
                .contains("17 NVLink links on this GPU, the profile expects 18 active (link 17 not supported)"),
            "{}",
            r.summary
        );
        // Every GPU with 12 (A100 SXM): equal, passes without a profile, fails a profile of 18.
        let a100 = node(
            (0..2)
                .map(|i| gpu(i, active(12), fabric(0, "NVML_SUCCESS", Some(0))))
                .collect(),
        );
        assert_eq!(statuses(&a100, None), [Status::Pass, Status::Pass]);
        assert_eq!(statuses(&a100, Some(12)), [Status::Pass, Status::Pass]);
        assert_eq!(statuses(&a100, Some(18)), [Status::Fail, Status::Fail]);
        // One GPU of the model without NVLink at all, beside peers that have it.
        let none = gpu(1, active(0), fabric(0, "NVML_SUCCESS", Some(0)));
        assert_eq!(
            statuses(&node(vec![hgx_gpu(0), none.clone()]), None),
            [Status::Pass, Status::Warn]
        );
        assert_eq!(
            statuses(&node(vec![hgx_gpu(0), none]), Some(18)),
            [Status::Pass, Status::Fail]
        );
    }

    #[test]
    fn fabric_states_short_of_completed_success_fail() {
        for (state, status, words) in [
            (1, "NVML_SUCCESS", "not started"),
            (2, "NVML_SUCCESS", "in progress"),
            (
                3,
                "NVML_ERROR_INSUFFICIENT_RESOURCES",
                "completed with NVML_ERROR_INSUFFICIENT_RESOURCES",
            ),
        ] {
            let g = gpu(0, active(18), fabric(state, status, Some(HEALTHY_MASK)));
            let r = &judge(&node(vec![g]), Some(18), None, false)[0];
            assert_eq!(r.status, Status::Fail, "{}", r.summary);
            assert!(r.summary.contains(words), "{}", r.summary);
        }
        let not_started = gpu(0, active(18), fabric(1, "NVML_SUCCESS", None));
        let r = &judge(&node(vec![not_started]), None, None, false)[0];
        assert!(r
            .remediation
            .as_deref()
            .unwrap()
            .contains("nvidia-fabricmanager"));
    }

    #[test]
    fn health_mask_degradations_fail_and_recoveries_warn() {
        let with = |field: u32, shift: u32| {
            let width = if shift == 8 { 0xf } else { 3 };
            HEALTHY_MASK & !(width << shift) | field << shift
        };
        for (mask, want, words) in [
            (with(1, 0), Status::Fail, "bandwidth degraded"),
            (with(1, 4), Status::Fail, "route unhealthy"),
            (with(5, 8), Status::Fail, "insufficient NVLinks"),
            (with(1, 2), Status::Warn, "route recovery in progress"),
            (with(1, 6), Status::Warn, "access-timeout recovery"),
            // A driver that reports none of the fields: nothing to judge.
            (0, Status::Pass, "18 of 18"),
        ] {
            let g = gpu(0, active(18), fabric(3, "NVML_SUCCESS", Some(mask)));
            let r = &judge(&node(vec![g]), None, None, false)[0];
            assert_eq!(r.status, want, "mask {mask:#x}: {}", r.summary);
            assert!(r.summary.contains(words), "{}", r.summary);
        }
    }

    /// v3's summary can say unhealthy while every mask field reads fine (kubernetes-sigs/dra-driver-nvidia-gpu#626).
    #[test]
    fn health_summary_unhealthy_or_limited_fails() {
        for (summary, want) in [
            (1, Status::Pass),
            (2, Status::Fail),
            (3, Status::Fail),
            (0, Status::Pass),
        ] {
            let mut g = hgx_gpu(0);
            if let Ok(info) = &mut g.nvlink.as_mut().unwrap().fabric {
                info.health_summary = Some(summary);
            }
            let r = &judge(&node(vec![g]), None, None, false)[0];
            assert_eq!(r.status, want, "summary {summary}: {}", r.summary);
        }
    }

    #[test]
    fn driver_without_fabric_call_judges_links_and_says_fabric_not_reported() {
        let g = gpu(0, active(18), Err("nvmlDeviceGetGpuFabricInfo: NVML_ERROR_FUNCTION_NOT_FOUND (this driver has neither nvmlDeviceGetGpuFabricInfoV nor nvmlDeviceGetGpuFabricInfo: undefined symbol)".into()));
        let r = &judge(&node(vec![g]), Some(18), None, false)[0];
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert_eq!(
            r.summary,
            "GPU 0, 18 of 18 NVLink links active, fabric not reported"
        );
    }

    #[test]
    fn per_call_errors_fail_naming_the_call_and_gpu() {
        let lost =
            "nvmlDeviceGetNvLinkState(link 4): NVML_ERROR_GPU_IS_LOST (device fell off the bus)";
        let unknown =
            "nvmlDeviceGetGpuFabricInfoV: NVML_ERROR_UNKNOWN (an internal driver error occurred)";
        let mut link_error = hgx_gpu(2);
        link_error.nvlink.as_mut().unwrap().links[4] = Err(lost.into());
        let fabric_error = gpu(2, active(18), Err(unknown.into()));
        // Even a GPU whose other links say "no NVLink": the error is not "no NVLink".
        let mut all_absent = gpu(2, active(0), fabric(0, "NVML_SUCCESS", Some(0)));
        all_absent.nvlink.as_mut().unwrap().links[0] = Err(lost.into());
        for (g, call) in [
            (link_error, lost),
            (fabric_error, unknown),
            (all_absent, lost),
        ] {
            let r = &judge(&node(vec![g]), None, None, false)[0];
            assert_eq!(r.status, Status::Fail, "{}", r.summary);
            assert!(
                r.summary.contains("GPU 2") && r.summary.contains(call),
                "{}",
                r.summary
            );
            assert!(r
                .remediation
                .as_deref()
                .unwrap()
                .contains("nvidia-smi -r -i 2"));
        }
        // The handle itself failed: nothing asked, and that fails too.
        let handle = GpuFacts {
            index: 5,
            name: Err(
                "nvmlDeviceGetHandleByIndex_v2: NVML_ERROR_GPU_IS_LOST (device fell off the bus)"
                    .into(),
            ),
            ..GpuFacts::default()
        };
        let r = &judge(&node(vec![hgx_gpu(0), handle]), None, None, false)[1];
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
        assert!(r.summary.contains("GPU_IS_LOST"), "{}", r.summary);
    }

    #[test]
    fn recording_without_nvlink_answers_is_not_judged() {
        let mut g = hgx_gpu(0);
        g.nvlink = None;
        let results = judge(&node(vec![g]), Some(18), None, false);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].status, Status::Skip);
        assert!(results[0].summary.contains("predate"));
    }

    /// A GB200 NVL72 tray GPU as nccl#1769 shows it: clique 0x7ffe, a cluster UUID, mask 0xaa (four flags
    /// FALSE, configuration not reported), from the v4 call with its clique list.
    fn tray_gpu(index: u32) -> GpuFacts {
        let mut g = gpu(index, active(18), fabric(3, "NVML_SUCCESS", Some(0xaa)));
        g.name = Ok("NVIDIA GB200".into());
        if let Ok(info) = &mut g.nvlink.as_mut().unwrap().fabric {
            info.call = "nvmlDeviceGetGpuFabricInfo_v4".into();
            info.clique_id = 0x7ffe;
            info.cluster_uuid = "3143b15bc2cd192b28cc9b5473fb5b93".into();
            info.health_summary = Some(1);
            info.cliques = Some(vec![
                nvml::FabricClique {
                    kind: 0,
                    id: 0x7ffe,
                },
                nvml::FabricClique {
                    kind: 1,
                    id: 0x7ffe,
                },
            ]);
        }
        g
    }

    fn with_fabric(mut g: GpuFacts, edit: impl FnOnce(&mut FabricInfo)) -> GpuFacts {
        if let Ok(info) = &mut g.nvlink.as_mut().unwrap().fabric {
            edit(info);
        }
        g
    }

    /// The node's own evidence, as `run` gathers it without a profile or IMEX files.
    fn judged(gpus: Vec<GpuFacts>) -> Vec<CheckResult> {
        let facts = node(gpus);
        let domain = nvlink_domain::named_by_nvml(&facts)
            .or_else(|| nvlink_domain::tray_gpu_with_fabric(&facts));
        judge(&facts, Some(18), domain.as_deref(), false)
    }

    #[test]
    fn tray_in_its_domain_passes_and_names_its_cliques() {
        let results = judged((0..4).map(tray_gpu).collect());
        for r in &results {
            assert_eq!(r.status, Status::Pass, "{}", r.summary);
        }
        let fabric = results[0]
            .evidence
            .iter()
            .find(|e| e.starts_with("nvmlDeviceGetGpuFabricInfo_v4"))
            .unwrap();
        assert!(
            fabric.contains("cliques [unicast pointer 32766, multicast pointer 32766]"),
            "{fabric}"
        );
    }

    /// Azure/azhpc-images#506 and its kin: completed, yet outside any clique or cluster. Each variant fails on
    /// the tray whose other GPUs are in the domain, and on a tray where no GPU names it (the model does).
    #[test]
    fn domain_gpu_completed_without_clique_or_cluster_fails() {
        type Edit = Box<dyn Fn(&mut FabricInfo)>;
        let variants: Vec<(&str, Edit)> = vec![
            ("clique 0", Box::new(|f| f.clique_id = 0)),
            (
                "zero cluster UUID",
                Box::new(|f| f.cluster_uuid = "0".repeat(32)),
            ),
            (
                "clique 0 and a zero cluster UUID",
                Box::new(|f| {
                    f.clique_id = 0;
                    f.cluster_uuid = "0".repeat(32);
                }),
            ),
            (
                "no clique",
                Box::new(|f| {
                    f.clique_id = 0;
                    f.cliques = Some(vec![]);
                }),
            ),
            (
                "NVML_ERROR_INSUFFICIENT_RESOURCES",
                Box::new(|f| {
                    f.status = "NVML_ERROR_INSUFFICIENT_RESOURCES".into();
                    f.clique_id = 0;
                    f.cluster_uuid = "0".repeat(32);
                }),
            ),
        ];
        for (words, edit) in &variants {
            let bad = with_fabric(tray_gpu(2), edit);
            let results = judged(vec![tray_gpu(0), tray_gpu(1), bad.clone(), tray_gpu(3)]);
            assert_eq!(
                results[2].status,
                Status::Fail,
                "{words}: {}",
                results[2].summary
            );
            assert!(results[2].summary.contains(words), "{}", results[2].summary);
            assert_eq!(results[0].status, Status::Pass);
            // Every GPU of the tray the same: the GB200 model alone places it in a domain.
            let all_bad = judged((0..4).map(|i| with_fabric(tray_gpu(i), edit)).collect());
            assert!(
                all_bad.iter().all(|r| r.status == Status::Fail),
                "{words}: {all_bad:?}"
            );
        }
    }

    /// Dstack-TEE/dstack#1167: all 18 links Active at full speed while the fabric is down. Inside a domain a GPU
    /// whose fabric is not supported, not reported, not started or in progress fails; a board used standalone
    /// (leptonai/gpud#1108: GB200 reading not supported, clique 0) passes.
    #[test]
    fn active_links_never_prove_the_fabric_in_a_domain() {
        let not_supported = |i| {
            with_fabric(tray_gpu(i), |f| {
                f.state = 0;
                f.clique_id = 0;
                f.cluster_uuid = "0".repeat(32);
                f.cliques = Some(vec![]);
            })
        };
        let unreported = |i| {
            let mut g = tray_gpu(i);
            g.nvlink.as_mut().unwrap().fabric = Err("nvmlDeviceGetGpuFabricInfo: NVML_ERROR_FUNCTION_NOT_FOUND (this driver has neither ...)".into());
            g
        };
        for (what, g) in [
            ("not supported", not_supported(1)),
            ("not reported", unreported(1)),
            ("not started", with_fabric(tray_gpu(1), |f| f.state = 1)),
            ("in progress", with_fabric(tray_gpu(1), |f| f.state = 2)),
        ] {
            let results = judged(vec![tray_gpu(0), g]);
            assert_eq!(
                results[1].status,
                Status::Fail,
                "{what}: {}",
                results[1].summary
            );
            assert!(
                results[1].summary.contains("18 of 18"),
                "{}",
                results[1].summary
            );
        }
        // The same answers on a standalone board: nothing places it in a domain.
        for g in [not_supported(0), unreported(0)] {
            let r = &judged(vec![g])[0];
            assert_eq!(r.status, Status::Pass, "{}", r.summary);
        }
        // The profile says the tray is in a domain: a standalone-looking answer fails.
        let facts = node(vec![not_supported(0)]);
        let r = &judge(
            &facts,
            Some(18),
            Some("the profile expects a multi-node NVLink domain"),
            false,
        )[0];
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
    }

    #[test]
    fn partition_unassigned_or_global_fabric_manager_disconnected_fails() {
        for (mask, words) in [
            (0xaa | 2 << 12, "no partition"),
            (
                0xaa | 1 << 12 | 2 << 14,
                "global fabric manager disconnected",
            ),
        ] {
            let g = with_fabric(tray_gpu(0), |f| f.health_mask = Some(mask));
            let r = &judged(vec![g])[0];
            assert_eq!(r.status, Status::Fail, "{mask:#x}: {}", r.summary);
            assert!(r.summary.contains(words), "{}", r.summary);
        }
        let connected = with_fabric(tray_gpu(0), |f| {
            f.health_mask = Some(0xaa | 1 << 12 | 1 << 14)
        });
        assert_eq!(judged(vec![connected])[0].status, Status::Pass);
    }

    /// An HGX H100/B200 reads completed with clique 0 and a zero UUID (meta-pytorch/torchcomms#1385): healthy,
    /// however many of its GPUs do.
    #[test]
    fn single_node_nvswitch_with_zero_clique_passes() {
        let results = judged((0..8).map(hgx_gpu).collect());
        assert!(
            results.iter().all(|r| r.status == Status::Pass),
            "{results:?}"
        );
    }

    /// testdata/gen_nvlink_domain.py's trays through `run`: the domain found by the fabric answers alone.
    #[test]
    fn recorded_gb200_trays() {
        use crate::probes::testing::run_on;
        let statuses = |tree| -> Vec<Status> {
            run_on(&GpuNvlink, tree, "generic")
                .iter()
                .map(|r| r.status)
                .collect()
        };
        assert_eq!(statuses("gb200-tray"), [Status::Pass; 4]);
        assert_eq!(statuses("gb200-standalone"), [Status::Pass; 4]);
        let r = run_on(&GpuNvlink, "gb200-tray-clique0", "generic");
        assert_eq!(
            r.iter().map(|r| r.status).collect::<Vec<_>>(),
            [Status::Pass, Status::Pass, Status::Fail, Status::Pass]
        );
        assert!(
            r[2].summary.contains("no clique and a zero cluster UUID"),
            "{}",
            r[2].summary
        );
    }

    #[test]
    fn link_lists_are_ranges() {
        assert_eq!(link_list(&[0, 1, 2, 3, 5, 7, 8]), "0-3, 5, 7-8");
        assert_eq!(link_list(&[17]), "17");
        assert_eq!(link_list(&[]), "");
    }
}
