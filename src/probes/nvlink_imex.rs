//! `nvlink.imex`: IMEX, the daemon that lets GPUs of a multi-node NVLink domain (GB200/GB300 NVL72) import each
//! other's memory, judged only where it applies: the node is in a domain (a GPU's fabric names a clique or
//! cluster), has an IMEX node list, or holds a ComputeDomain. There the daemon must run, its node list must
//! hold this node, the channel device files must exist, every peer `nvidia-imex-ctl -N` lists must be READY, and
//! the channels a container's `NVIDIA_IMEX_CHANNELS` names must exist. Elsewhere it skips, never fails: IMEX
//! reported unhealthy on nodes that never use it is the false alarm peers ship (NVIDIA/aicr#2641,
//! NVIDIA/NVSentinel#1471).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::bounded_command::{self, CommandAnswer};
use crate::dynlib::nvml::NvmlFacts;
use crate::host::{self, Host, ReadError};
use crate::probe::{
    common, AnswerSource, CheckResult, Context, Explain, FindingCode, Findings, Kind, Library,
    Probe, ProbeMeta, Remedy,
};
use crate::probes::shared::facts::NVML;
use crate::probes::shared::gpu::mark_replayed;
use crate::rules::nvlink_domain::{self, ImexConfig};
use crate::sysfs::netaddr;

pub struct NvlinkImex;

const ID: &str = "nvlink.imex";

/// `nvidia-imex-ctl -N -j`: the domain's status as JSON, read-only (imex-guide, command service).
const CTL_ARGS: [&str; 2] = ["-N", "-j"];
/// Key of the tool's answer in recorded vendor answers.
pub const CTL_KEY: &str = "imex.ctl_domain_status";
const CTL_TIMEOUT: Duration = Duration::from_secs(10);
const CTL_OUTPUT_CAP: usize = 1 << 20;
const CTL_DIRS: [&str; 4] = ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"];
const DAEMON: &str = "nvidia-imex";
const CHANNEL_DIR: &str = "/dev/nvidia-caps-imex-channels";
const CHANNEL_DEVICE: &str = "nvidia-caps-imex-channels";
const ENV_CHANNELS: &str = "NVIDIA_IMEX_CHANNELS";

const FIX_DAEMON: &str =
    "start the IMEX daemon: `systemctl enable --now nvidia-imex` (same version as the \
driver); `journalctl -u nvidia-imex` and /var/log/nvidia-imex.log say why it stopped";
const FIX_NODES: &str = "list this node's own IP address (the one on the IMEX network) in the node list on every \
node of the domain, identically, then restart nvidia-imex everywhere (it reads the list only at start)";
const FIX_CHANNELS: &str =
    "create the channel: `mknod /dev/nvidia-caps-imex-channels/channel0 c $(awk \
'/nvidia-caps-imex-channels/{print $1}' /proc/devices) 0` (lost at reboot: or load nvidia with \
NVreg_CreateImexChannel0=1)";
const FIX_PEERS: &str =
    "`nvidia-imex-ctl -N` on each node shows which peers are not READY/connected: check that \
node's nvidia-imex, the IMEX port (50000) between the nodes and that every node list is identical";
const FIX_CTL: &str = "run `nvidia-imex-ctl -N` by hand; IMEX_CMD_ENABLED=1 and IMEX_CMD_PORT in \
/etc/nvidia-imex/config.cfg let it reach the daemon";
const FIX_UNCONFIGURED: &str =
    "cross-node GPU memory (MNNVL) needs IMEX: configure the nvidia-imex service (its \
node list) or run the job in a Kubernetes ComputeDomain";
const FIX_ENV: &str =
    "give the container the channels it names (the NVIDIA container toolkit creates them \
unless disabled), or correct NVIDIA_IMEX_CHANNELS";

const DAEMON_DOWN: FindingCode = FindingCode {
    code: "NVL001",
    title: "the IMEX daemon is not running",
    explanation: "The node is in an NVLink domain but nvidia-imex is not running: CUDA cannot share fabric memory across nodes. `systemctl enable --now nvidia-imex`.",
    step: Some(Remedy::RestartService),
};
const NO_CHANNEL: FindingCode = FindingCode {
    code: "NVL002",
    title: "no IMEX channel: CUDA refuses fabric memory without one",
    explanation: "/dev/nvidia-caps-imex-channels holds no channel: create channel 0 (the driver's NVreg_CreateImexChannel0=1, or mknod against the major in /proc/devices).",
    step: Some(Remedy::LoadModule),
};
const UNCONFIGURED: FindingCode = FindingCode {
    code: "NVL003",
    title: "the node is in an NVLink domain but IMEX is not configured",
    explanation: "The IMEX node list is empty or missing and no ComputeDomain is present: list the domain's nodes in /etc/nvidia-imex/nodes_config.cfg, or use a ComputeDomain.",
    step: Some(Remedy::Reconfigure),
};
const NO_CHANNEL_DEVICE: FindingCode = FindingCode {
    code: "NVL004",
    title: "the driver lists no IMEX channel device in /proc/devices",
    explanation: "The driver does not register nvidia-caps-imex-channels: a driver without IMEX support, or one loaded without it.",
    step: Some(Remedy::LoadModule),
};
const CHANNEL_NOT_DEVICE: FindingCode = FindingCode {
    code: "NVL005",
    title: "an IMEX channel node is not the IMEX character device",
    explanation: "The channel file's major:minor is not the driver's IMEX channel device: recreate it with the right major.",
    step: Some(Remedy::Reconfigure),
};
const NOT_IN_NODE_LIST: FindingCode = FindingCode {
    code: "NVL006",
    title: "this node is not in the IMEX node list",
    explanation: "None of this node's addresses is in nodes_config.cfg: the daemon will not join the domain. A warning when the list names hosts by name (not resolved here).",
    step: Some(Remedy::Reconfigure),
};
const CTL_FAILED: FindingCode = FindingCode {
    code: "NVL007",
    title: "nvidia-imex-ctl failed or its answer is not the domain status",
    explanation: "An error: the domain status could not be asked, so the peers' state is unknown.",
    step: None,
};
const DOMAIN_DOWN: FindingCode = FindingCode {
    code: "NVL008",
    title: "the IMEX domain is not UP",
    explanation: "nvidia-imex-ctl reports the domain not UP: restart the IMEX daemons of the domain, checking their logs.",
    step: Some(Remedy::RestartService),
};
const PEERS_NOT_READY: FindingCode = FindingCode {
    code: "NVL009",
    title: "IMEX peers are not READY",
    explanation: "Nodes of the domain are not READY: restart their IMEX daemons.",
    step: Some(Remedy::RestartService),
};
const NOT_CONNECTED: FindingCode = FindingCode {
    code: "NVL010",
    title: "IMEX connections from this node are not connected",
    explanation: "This node's daemon is not connected to some peers: check the network between them and restart the daemons.",
    step: Some(Remedy::RestartService),
};
const ENV_NO_CHANNEL: FindingCode = FindingCode {
    code: "NVL011",
    title: "NVIDIA_IMEX_CHANNELS=all but the container holds no channel",
    explanation: "The container asked for every IMEX channel but none was mounted: mount /dev/nvidia-caps-imex-channels into it.",
    step: Some(Remedy::Reconfigure),
};
const ENV_MISSING_CHANNEL: FindingCode = FindingCode {
    code: "NVL012",
    title: "NVIDIA_IMEX_CHANNELS names channels the container does not hold",
    explanation: "Channels the container was promised are missing from /dev/nvidia-caps-imex-channels: mount them.",
    step: Some(Remedy::Reconfigure),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "IMEX on a multi-node NVLink domain node: daemon running, this node in its list, channels, peers READY",
    needs: &[],
    kind: Kind::Library,
    libraries: &[Library::Nvml],
    facts: &[&NVML],
    explain: Explain {
        reads: "NVML's fabric answers (clique, cluster UUID); /etc/nvidia-imex/config.cfg and its node list \
                (IMEX_NODE_CONFIG_FILE); ComputeDomain CDI specs (/var/run/cdi, /etc/cdi); /proc/*/comm for \
                nvidia-imex; /proc/net/fib_trie and /proc/sys/kernel/hostname for this node's addresses; \
                /proc/devices and /dev/nvidia-caps-imex-channels/channel*; NVIDIA_IMEX_CHANNELS; \
                `nvidia-imex-ctl -N -j` where installed (10 s, 1 MiB of output; recorded like library answers)",
        why: "On GB200/GB300 NVL72 trays CUDA shares GPU memory across trays through IMEX. With the daemon down, \
              this node missing from its list, no channel, or a peer not READY, every link and the fabric look \
              healthy but NCCL's MNNVL and cuMem fabric handles fail ('MNNVL is available but not working', \
              CUDA 801) on that node's first multi-node job.",
        fixes: &[
            ("nvidia-imex not running", FIX_DAEMON),
            ("this node not in the IMEX node list", FIX_NODES),
            ("no IMEX channel device", FIX_CHANNELS),
            ("a peer not READY or not connected, domain not UP", FIX_PEERS),
            ("nvidia-imex-ctl failed or timed out", FIX_CTL),
            ("a domain node with no IMEX configured", FIX_UNCONFIGURED),
            ("NVIDIA_IMEX_CHANNELS names a channel that does not exist", FIX_ENV),
        ],
    },
    findings: &[
        &DAEMON_DOWN,
        &NO_CHANNEL,
        &UNCONFIGURED,
        &NO_CHANNEL_DEVICE,
        &CHANNEL_NOT_DEVICE,
        &NOT_IN_NODE_LIST,
        &CTL_FAILED,
        &DOMAIN_DOWN,
        &PEERS_NOT_READY,
        &NOT_CONNECTED,
        &ENV_NO_CHANNEL,
        &ENV_MISSING_CHANNEL,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for NvlinkImex {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let nvml = cx.answers.obtain(NVML.key, crate::dynlib::nvml::collect);
    let replayed = nvml.as_ref().is_ok_and(|o| o.replayed);
    let facts = Facts::read(cx, nvml.ok().map(|o| o.value).as_ref())?;
    Ok(vec![mark_replayed(judge(&facts), replayed)])
}

/// One channel device file.
#[derive(Debug, Clone, PartialEq)]
struct Channel {
    number: u32,
    /// Live: a character device of the IMEX major with this minor. A recorded tree holds a plain file.
    usable: bool,
}

#[derive(Debug, Default)]
struct Facts {
    /// Why IMEX applies here, by source.
    domain_by_nvml: Option<String>,
    config: Option<ImexConfig>,
    compute_domain: Option<String>,
    daemon_pids: Vec<u32>,
    /// This node's IPv4 addresses and host name.
    addresses: Vec<String>,
    hostname: Option<String>,
    channel_major: Option<u32>,
    channels: Vec<Channel>,
    env_channels: Option<String>,
    /// `None`: not installed (or not asked: IMEX does not apply, or the command service is disabled).
    ctl: Option<Result<CommandAnswer, String>>,
}

impl Facts {
    fn read(cx: &Context<'_>, nvml: Option<&NvmlFacts>) -> Result<Facts, ReadError> {
        let host = cx.host;
        let mut f = Facts {
            domain_by_nvml: nvml.and_then(nvlink_domain::named_by_nvml),
            config: ImexConfig::read(host)?,
            compute_domain: nvlink_domain::compute_domain(host)?,
            env_channels: cx.inputs.env.get(ENV_CHANNELS).cloned(),
            ..Facts::default()
        };
        if f.applies().is_none() {
            return Ok(f);
        }
        f.daemon_pids = daemon_pids(host)?;
        f.addresses = netaddr::read_local_ipv4(host)?
            .iter()
            .map(|a| a.to_string())
            .collect();
        f.hostname = host::optional(host.read("/proc/sys/kernel/hostname"))?;
        f.channel_major = host::optional(host.read("/proc/devices"))?
            .and_then(|t| char_major(&t, CHANNEL_DEVICE));
        f.channels = read_channels(host, f.channel_major)?;
        f.ctl = ctl_answer(cx, f.config.as_ref());
        Ok(f)
    }

    /// Why IMEX applies on this node, or `None`.
    fn applies(&self) -> Option<String> {
        let listed = self
            .config
            .as_ref()
            .filter(|c| !c.nodes.is_empty())
            .map(|c| {
                format!(
                    "the IMEX node list {} names {} node(s)",
                    c.node_file,
                    c.nodes.len()
                )
            });
        self.domain_by_nvml
            .clone()
            .or(listed)
            .or_else(|| self.compute_domain.clone())
    }
}

/// Processes named `nvidia-imex` (not `nvidia-imex-ctl`), by `/proc/<pid>/comm`; a process that ends while
/// being read is no process, any other failure to read is an error.
fn daemon_pids(host: &Host) -> Result<Vec<u32>, ReadError> {
    let mut pids = Vec::new();
    for pid in host
        .read_dir("/proc")?
        .iter()
        .filter_map(|n| n.parse::<u32>().ok())
    {
        if host::optional(host.read(&format!("/proc/{pid}/comm")))?
            .is_some_and(|c| c.trim() == DAEMON)
        {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    Ok(pids)
}

/// A character device's major number from `/proc/devices`.
fn char_major(devices: &str, name: &str) -> Option<u32> {
    devices
        .lines()
        .skip_while(|l| !l.starts_with("Character devices"))
        .take_while(|l| !l.starts_with("Block devices"))
        .find_map(|l| {
            let (major, dev) = l.trim().split_once(' ')?;
            (dev.trim() == name).then(|| major.parse().ok())?
        })
}

fn read_channels(host: &Host, major: Option<u32>) -> Result<Vec<Channel>, ReadError> {
    let Some(names) = host::optional(host.read_dir(CHANNEL_DIR))? else {
        return Ok(vec![]);
    };
    let mut channels: Vec<Channel> = names
        .iter()
        .filter_map(|n| n.strip_prefix("channel")?.parse::<u32>().ok())
        .map(|number| {
            let path = format!("{CHANNEL_DIR}/channel{number}");
            let usable = match host.metadata(&path) {
                // A recorded tree cannot hold device nodes: its file records that one existed.
                Ok(_) if !host.is_live() => true,
                Ok(m) => {
                    m.file_type().is_char_device()
                        && Some(libc::major(m.rdev())) == major
                        && libc::minor(m.rdev()) == number
                }
                Err(_) => false,
            };
            Channel { number, usable }
        })
        .collect();
    channels.sort_by_key(|c| c.number);
    Ok(channels)
}

/// `nvidia-imex-ctl -N -j` where the host model applies and the tool is installed: run live (bounded), replayed
/// from a recording, and never run for a recorded tree that has no recording (its answer would be this
/// machine's).
fn ctl_answer(
    cx: &Context<'_>,
    config: Option<&ImexConfig>,
) -> Option<Result<CommandAnswer, String>> {
    let config = config?;
    if config.cmd_enabled == Some(false) {
        return None;
    }
    let tool = CTL_DIRS
        .iter()
        .map(|d| format!("{d}/nvidia-imex-ctl"))
        .find(|p| cx.host.exists(p))?;
    if !cx.host.is_live() && cx.answers.source() != AnswerSource::Recorded {
        return Some(Err(format!(
            "{tool} is in the tree but the tree has no recorded answers ({CTL_KEY})"
        )));
    }
    let timeout = CTL_TIMEOUT.min(cx.time_left());
    let answer = cx.answers.obtain(CTL_KEY, || {
        bounded_command::run(Path::new(&tool), &CTL_ARGS, timeout, CTL_OUTPUT_CAP)
    });
    Some(answer.map(|o| o.value))
}

/// `nvidia-imex-ctl -N -j`'s JSON (NVIDIA/ai-cloud-validation, checked live against the tool): the domain's
/// `status` and, per node, its `status`, `host` (IP), `hostName` and `connections` to every member.
#[derive(Debug, Deserialize)]
struct DomainStatus {
    status: String,
    #[serde(default)]
    nodes: std::collections::BTreeMap<String, NodeStatus>,
}

#[derive(Debug, Deserialize)]
struct NodeStatus {
    status: String,
    host: String,
    #[serde(default, rename = "hostName")]
    host_name: Option<String>,
    #[serde(default)]
    connections: std::collections::BTreeMap<String, Connection>,
}

#[derive(Debug, Deserialize)]
struct Connection {
    host: String,
    status: String,
}

fn judge(f: &Facts) -> CheckResult {
    let Some(why) = f.applies() else {
        return CheckResult::skip(
            ID,
            "IMEX does not apply: no GPU fabric names an NVLink domain (clique or cluster UUID), no IMEX node \
             list has addresses and no ComputeDomain is present",
        ).code(&common::ABSENT);
    };
    let mut findings = Findings::default();
    let host_model = f.config.as_ref().filter(|c| !c.nodes.is_empty());
    match host_model {
        Some(config) => {
            if f.daemon_pids.is_empty() {
                findings.coded(&DAEMON_DOWN).fail(
                    format!("the IMEX daemon ({DAEMON}) is not running"),
                    FIX_DAEMON,
                );
            }
            judge_node_list(f, config, &mut findings);
            if f.channels.is_empty() {
                findings.coded(&NO_CHANNEL).fail(
                    format!("no IMEX channel in {CHANNEL_DIR}: CUDA refuses fabric memory without one"),
                    FIX_CHANNELS,
                );
            }
            if let Some(ctl) = &f.ctl {
                judge_ctl(ctl, f, &mut findings);
            }
        }
        None if f.compute_domain.is_none() => findings.coded(&UNCONFIGURED).warn(
            match &f.config {
                Some(c) => format!(
                    "this node is in an NVLink domain but its IMEX node list {} is empty",
                    c.node_file
                ),
                None => "this node is in an NVLink domain but has no IMEX configuration and no ComputeDomain"
                    .to_string(),
            },
            FIX_UNCONFIGURED,
        ),
        // A ComputeDomain runs its own IMEX daemon in a pod and makes channels per claim: only what this
        // container was promised is judged.
        None => {}
    }
    if f.channel_major.is_none() && (host_model.is_some() || f.env_channels.is_some()) {
        findings.coded(&NO_CHANNEL_DEVICE).fail(
            format!("the driver lists no {CHANNEL_DEVICE} device in /proc/devices"),
            FIX_CHANNELS,
        );
    }
    for c in f.channels.iter().filter(|c| !c.usable) {
        findings.coded(&CHANNEL_NOT_DEVICE).fail(
            format!(
                "{CHANNEL_DIR}/channel{} is not the IMEX character device {}:{}",
                c.number,
                f.channel_major.map_or("?".into(), |m| m.to_string()),
                c.number
            ),
            FIX_CHANNELS,
        );
    }
    if let Some(env) = &f.env_channels {
        judge_env_channels(env, &f.channels, &mut findings);
    }
    let channels: Vec<String> = f.channels.iter().map(|c| c.number.to_string()).collect();
    let summary = format!(
        "IMEX applies ({why}); daemon {}, channels [{}]",
        if f.daemon_pids.is_empty() {
            "not seen".to_string()
        } else {
            format!("pid {}", f.daemon_pids[0])
        },
        channels.join(", ")
    );
    let mut r = findings.result(ID, summary);
    if let Some(c) = &f.config {
        r = r.evidence(&c.node_file, c.nodes.join(", "));
    }
    r = r.evidence("this node", {
        let mut own = f.addresses.clone();
        own.extend(f.hostname.clone());
        own.join(", ")
    });
    if let Some(Ok(answer)) = &f.ctl {
        r = r.evidence(&answer.argv.join(" "), answer.stdout.trim());
    }
    r
}

/// The list must hold this node: by address where it lists addresses; a list of names is matched against the
/// host name only, so a name that does not match warns (it may resolve to this node).
fn judge_node_list(f: &Facts, config: &ImexConfig, findings: &mut Findings) {
    let short = f
        .hostname
        .as_deref()
        .map(|h| h.split('.').next().unwrap_or(h));
    let listed = config.nodes.iter().any(|n| {
        f.addresses.contains(n)
            || Some(n.as_str()) == f.hostname.as_deref()
            || Some(n.split('.').next().unwrap_or(n)) == short
    });
    if listed {
        return;
    }
    let problem = format!(
        "this node ({}) is not in the IMEX node list {}",
        f.addresses.join(", "),
        config.node_file
    );
    if config
        .nodes
        .iter()
        .all(|n| n.parse::<std::net::IpAddr>().is_ok())
    {
        findings.coded(&NOT_IN_NODE_LIST).fail(problem, FIX_NODES);
    } else {
        findings.coded(&NOT_IN_NODE_LIST).warn(
            format!("{problem} by address or host name (names were not resolved)"),
            FIX_NODES,
        );
    }
}

fn judge_ctl(ctl: &Result<CommandAnswer, String>, f: &Facts, findings: &mut Findings) {
    let answer = match ctl {
        Ok(a) => a,
        Err(e) => return findings.unread("nvidia-imex-ctl -N -j", e),
    };
    if !answer.succeeded() {
        return findings.coded(&CTL_FAILED).add(
            crate::probe::Status::Error,
            answer.describe(),
            FIX_CTL,
        );
    }
    let status: DomainStatus = match serde_json::from_str(&answer.stdout) {
        Ok(s) => s,
        Err(e) => {
            return findings.coded(&CTL_FAILED).add(
                crate::probe::Status::Error,
                format!(
                    "{}: output is not the domain status JSON ({e})",
                    answer.argv.join(" ")
                ),
                FIX_CTL,
            )
        }
    };
    if status.status != "UP" {
        findings
            .coded(&DOMAIN_DOWN)
            .fail(format!("IMEX domain {}", status.status), FIX_PEERS);
    }
    let not_ready: Vec<String> = status
        .nodes
        .values()
        .filter(|n| n.status != "READY")
        .map(|n| format!("{} {}", node_name(n), n.status))
        .collect();
    if !not_ready.is_empty() {
        findings.coded(&PEERS_NOT_READY).fail(
            format!("IMEX peers not READY: {}", not_ready.join(", ")),
            FIX_PEERS,
        );
    }
    // This node's view of its connections: every member CONNECTED.
    if let Some(own) = status
        .nodes
        .values()
        .find(|n| f.addresses.contains(&n.host))
    {
        let down: Vec<String> = own
            .connections
            .values()
            .filter(|c| c.status != "CONNECTED")
            .map(|c| format!("{} {}", c.host, c.status))
            .collect();
        if !down.is_empty() {
            findings.coded(&NOT_CONNECTED).fail(
                format!(
                    "IMEX connections from this node not connected: {}",
                    down.join(", ")
                ),
                FIX_PEERS,
            );
        }
    }
}

fn node_name(n: &NodeStatus) -> String {
    match n.host_name.as_deref() {
        Some(name) if name != "N/A" && !name.is_empty() => format!("{} ({name})", n.host),
        _ => n.host.clone(),
    }
}

/// `NVIDIA_IMEX_CHANNELS`: `all`, `none`, or channel numbers separated by commas.
fn judge_env_channels(env: &str, channels: &[Channel], findings: &mut Findings) {
    let value = env.trim();
    if value.is_empty() || value.eq_ignore_ascii_case("none") || value.eq_ignore_ascii_case("void")
    {
        return;
    }
    if value.eq_ignore_ascii_case("all") {
        if channels.is_empty() {
            findings.coded(&ENV_NO_CHANNEL).fail(
                format!("{ENV_CHANNELS}=all but {CHANNEL_DIR} holds no channel"),
                FIX_ENV,
            );
        }
        return;
    }
    let mut missing = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u32>() {
            Ok(n) if channels.iter().any(|c| c.number == n && c.usable) => {}
            Ok(n) => missing.push(format!("channel{n}")),
            Err(_) => missing.push(format!("'{part}' (not a channel number)")),
        }
    }
    if !missing.is_empty() {
        findings.coded(&ENV_MISSING_CHANNEL).fail(
            format!(
                "{ENV_CHANNELS}={value} names {} that {CHANNEL_DIR} does not hold",
                missing.join(", ")
            ),
            FIX_ENV,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;

    const TRAY_IP: &str = "10.1.0.11";

    /// `nvidia-imex-ctl -N -j` of a two-tray domain in the shape the tool prints: `status` per node, its `host`
    /// and `hostName`, and its `connections` to every member.
    fn ctl_json(domain: &str, peer_status: &str, link: &str) -> String {
        serde_json::json!({
            "nodes": {
                "0": {"status": "READY", "host": TRAY_IP, "hostName": "gb200-tray-01",
                      "connections": {"0": {"host": TRAY_IP, "status": "CONNECTED", "changed": false},
                                      "1": {"host": "10.1.0.12", "status": link, "changed": true}}},
                "1": {"status": peer_status, "host": "10.1.0.12", "hostName": "gb200-tray-02",
                      "connections": {"0": {"host": TRAY_IP, "status": link, "changed": true},
                                      "1": {"host": "10.1.0.12", "status": "CONNECTED", "changed": false}}}
            },
            "timestamp": "12/5/2026 23:10:00.000",
            "status": domain
        })
        .to_string()
    }

    fn ctl_ok(stdout: String) -> Option<Result<CommandAnswer, String>> {
        Some(Ok(CommandAnswer {
            argv: vec!["nvidia-imex-ctl".into(), "-N".into(), "-j".into()],
            exit_code: Some(0),
            stdout,
            stderr: String::new(),
            failure: None,
            truncated: false,
        }))
    }

    /// A GB200 tray with the host IMEX service up: clique 0x7ffe, two trays listed, channel 0, peers READY.
    fn tray() -> Facts {
        Facts {
            domain_by_nvml: Some(
                "GPU 0 reports clique 32766 in cluster 3143b15bc2cd192b28cc9b5473fb5b93".into(),
            ),
            config: Some(ImexConfig {
                node_file: "/etc/nvidia-imex/nodes_config.cfg".into(),
                nodes: vec![TRAY_IP.into(), "10.1.0.12".into()],
                cmd_enabled: Some(true),
            }),
            daemon_pids: vec![2211],
            addresses: vec!["127.0.0.1".into(), TRAY_IP.into()],
            hostname: Some("gb200-tray-01".into()),
            channel_major: Some(234),
            channels: vec![Channel {
                number: 0,
                usable: true,
            }],
            ctl: ctl_ok(ctl_json("UP", "READY", "CONNECTED")),
            ..Facts::default()
        }
    }

    fn judged(f: &Facts) -> CheckResult {
        judge(f)
    }

    #[test]
    fn healthy_tray_passes() {
        let r = judged(&tray());
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert!(
            r.summary.contains("daemon pid 2211, channels [0]"),
            "{}",
            r.summary
        );
    }

    /// NVIDIA/NVSentinel#1471, aws/eks-node-monitoring-agent#63: nodes outside any domain (HGX with the IMEX
    /// package's default files, p5, a standalone GB200 board) skip, whatever else is missing.
    #[test]
    fn nodes_outside_a_domain_skip_and_never_fail() {
        let package_defaults = Facts {
            config: Some(ImexConfig {
                node_file: "/etc/nvidia-imex/nodes_config.cfg".into(),
                nodes: vec![],
                cmd_enabled: Some(true),
            }),
            ..Facts::default()
        };
        for f in [Facts::default(), package_defaults] {
            let r = judged(&f);
            assert_eq!(r.status, Status::Skip, "{}", r.summary);
            assert!(r.summary.contains("does not apply"), "{}", r.summary);
        }
    }

    /// The class "IMEX down on a domain tray passes": each way it is down fails on the healthy tray.
    #[test]
    fn each_broken_piece_of_the_host_service_fails() {
        type Edit = Box<dyn Fn(&mut Facts)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("not running", Box::new(|f| f.daemon_pids.clear())),
            (
                "not in the IMEX node list",
                Box::new(|f| {
                    f.config.as_mut().unwrap().nodes = vec!["10.1.0.12".into(), "10.1.0.13".into()]
                }),
            ),
            ("no IMEX channel", Box::new(|f| f.channels.clear())),
            (
                "not the IMEX character device",
                Box::new(|f| f.channels[0].usable = false),
            ),
            (
                "no nvidia-caps-imex-channels device",
                Box::new(|f| f.channel_major = None),
            ),
            (
                "IMEX domain DOWN",
                Box::new(|f| f.ctl = ctl_ok(ctl_json("DOWN", "READY", "CONNECTED"))),
            ),
            (
                "IMEX domain DEGRADED",
                Box::new(|f| f.ctl = ctl_ok(ctl_json("DEGRADED", "READY", "CONNECTED"))),
            ),
            (
                "peers not READY: 10.1.0.12 (gb200-tray-02) UNAVAILABLE",
                Box::new(|f| f.ctl = ctl_ok(ctl_json("UP", "UNAVAILABLE", "CONNECTED"))),
            ),
            (
                "not connected: 10.1.0.12 INVALID",
                Box::new(|f| f.ctl = ctl_ok(ctl_json("UP", "READY", "INVALID"))),
            ),
        ];
        for (words, edit) in &cases {
            let mut f = tray();
            edit(&mut f);
            let r = judged(&f);
            assert_eq!(r.status, Status::Fail, "{words}: {}", r.summary);
            assert!(r.summary.contains(words), "{words}: {}", r.summary);
        }
    }

    /// The tool hung, failed, printed something else, or a recorded tree holds it without its answer: an error
    /// naming the call, never a pass on what was not read.
    #[test]
    fn a_tool_that_did_not_answer_is_an_error_naming_it() {
        let hung = CommandAnswer {
            argv: vec!["nvidia-imex-ctl".into(), "-N".into(), "-j".into()],
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            failure: Some("still running after 10 s, killed".into()),
            truncated: false,
        };
        let mut failed = hung.clone();
        failed.failure = None;
        failed.exit_code = Some(1);
        failed.stderr = "Failed to connect to IMEX daemon".into();
        let mut garbage = failed.clone();
        garbage.exit_code = Some(0);
        garbage.stdout = "Domain State: UP".into();
        for (ctl, words) in [
            (Ok(hung), "still running after 10 s"),
            (Ok(failed), "exit 1: Failed to connect"),
            (Ok(garbage), "not the domain status JSON"),
            (
                Err(
                    "/usr/bin/nvidia-imex-ctl is in the tree but the tree has no recorded answers"
                        .to_string(),
                ),
                "not read",
            ),
        ] {
            let mut f = tray();
            f.ctl = Some(ctl);
            let r = judged(&f);
            assert_eq!(r.status, Status::Error, "{words}: {}", r.summary);
            assert!(
                r.summary.contains("nvidia-imex-ctl") && r.summary.contains(words),
                "{}",
                r.summary
            );
        }
    }

    #[test]
    fn node_list_matches_by_address_or_host_name() {
        let mut by_name = tray();
        by_name.config.as_mut().unwrap().nodes =
            vec!["gb200-tray-01.rack7".into(), "gb200-tray-02".into()];
        assert_eq!(judged(&by_name).status, Status::Pass);
        // Names this tool cannot resolve: it may still be this node.
        by_name.config.as_mut().unwrap().nodes = vec!["tray-a".into(), "tray-b".into()];
        assert_eq!(judged(&by_name).status, Status::Warn);
    }

    #[test]
    fn container_channels_must_exist() {
        for (env, want, words) in [
            ("0", Status::Pass, ""),
            ("all", Status::Pass, ""),
            ("none", Status::Pass, ""),
            ("0,3", Status::Fail, "names channel3"),
            ("zero", Status::Fail, "'zero' (not a channel number)"),
        ] {
            let mut f = tray();
            f.env_channels = Some(env.into());
            let r = judged(&f);
            assert_eq!(r.status, want, "{env}: {}", r.summary);
            assert!(r.summary.contains(words), "{}", r.summary);
        }
        // A ComputeDomain pod promised channel 0 that was never made.
        let f = Facts {
            compute_domain: Some(
                "ComputeDomain CDI spec /var/run/cdi/k8s.compute-domain.nvidia.com-claim.json"
                    .into(),
            ),
            channel_major: Some(234),
            env_channels: Some("all".into()),
            ..Facts::default()
        };
        assert_eq!(judged(&f).status, Status::Fail);
    }

    /// A domain tray with no IMEX set up at all (Kubernetes between ComputeDomains): warned, not failed.
    #[test]
    fn domain_without_any_imex_warns() {
        let f = Facts {
            domain_by_nvml: tray().domain_by_nvml,
            ..Facts::default()
        };
        let r = judged(&f);
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        let cd = Facts {
            compute_domain: Some("ComputeDomain CDI spec /var/run/cdi/x".into()),
            ..f
        };
        assert_eq!(judged(&cd).status, Status::Pass);
    }

    /// The recorded trees of testdata/gen_nvlink_domain.py, end to end through the root and the recording.
    #[test]
    fn recorded_trays_judge_through_the_root() {
        use crate::probes::testing::run_on;
        let r = &run_on(&NvlinkImex, "gb200-tray", "generic")[0];
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert!(
            r.evidence.iter().any(|e| e.contains("\"status\": \"UP\"")),
            "{:?}",
            r.evidence
        );
        let r = &run_on(&NvlinkImex, "gb200-tray-imex-down", "generic")[0];
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
        for words in [
            "nvidia-imex) is not running",
            "no IMEX channel",
            "nvidia-imex-ctl -N -j: exit 1: Connection to the IMEX daemon",
        ] {
            assert!(r.summary.contains(words), "{words}: {}", r.summary);
        }
        let r = &run_on(&NvlinkImex, "gb200-standalone", "generic")[0];
        assert_eq!(r.status, Status::Skip, "{}", r.summary);
        // An HGX H100 board (fabric completed, clique 0) and a node without GPUs.
        for tree in ["nvlink-hgx-h100", "rxe-vm"] {
            let r = &run_on(&NvlinkImex, tree, "generic")[0];
            assert_eq!(r.status, Status::Skip, "{tree}: {}", r.summary);
        }
    }

    #[test]
    fn local_addresses_and_channel_major_parse() {
        let fib = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 10.1.0.0/24 2 0 2\n        |-- 10.1.0.0\n           /24 link UNICAST\n        |-- 10.1.0.11\n           /32 host LOCAL\n  +-- 127.0.0.0/8 2 0 2\n     |-- 127.0.0.1\n        /32 host LOCAL\nLocal:\n  |-- 10.1.0.11\n     /32 host LOCAL\n";
        assert_eq!(
            crate::sysfs::netaddr::parse_fib_trie_local(fib)
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>(),
            ["10.1.0.11", "127.0.0.1"]
        );
        let devices = "Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n\nBlock devices:\n234 nvidia-caps-imex-channels\n";
        assert_eq!(char_major(devices, CHANNEL_DEVICE), Some(234));
        assert_eq!(
            char_major("Character devices:\n195 nvidia\n", CHANNEL_DEVICE),
            None
        );
    }
}
