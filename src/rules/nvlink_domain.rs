//! Whether this node belongs to a multi-node NVLink domain (GB200/GB300 NVL72, GH200 NVL32): the rules that
//! hold only there (a fabric clique and cluster UUID, IMEX) are judged only where one of these says so. An HGX
//! H100 reads fabric COMPLETED with clique 0 and a zero cluster UUID and is healthy (meta-pytorch/torchcomms#1385);
//! a GB200 used standalone reads NOT_SUPPORTED (leptonai/gpud#1108).

use crate::dynlib::nvml::{NvmlFacts, FABRIC_STATE_NOT_SUPPORTED};
use crate::host::{self, Host, ReadError};

/// The IMEX daemon's configuration and its default node list (imex-guide, deployment).
pub const IMEX_CONFIG: &str = "/etc/nvidia-imex/config.cfg";
pub const IMEX_NODES_CONFIG: &str = "/etc/nvidia-imex/nodes_config.cfg";
/// Where CDI specs live; the DRA driver's ComputeDomain channels come as `compute-domain.nvidia.com` devices.
const CDI_DIRS: [&str; 2] = ["/var/run/cdi", "/etc/cdi"];
const COMPUTE_DOMAIN_DRIVER: &str = "compute-domain.nvidia.com";

/// NVML product names of GPUs that live only in NVLink-domain trays (GB200/GB300 compute trays): their fabric
/// reads NOT_SUPPORTED outside a domain, so any other state places them in one.
const DOMAIN_ONLY_MODELS: [&str; 2] = ["GB200", "GB300"];

/// The first GPU whose fabric answer names a domain (a clique or a cluster UUID other than zero).
pub fn named_by_nvml(facts: &NvmlFacts) -> Option<String> {
    facts.gpus.iter().find_map(|g| {
        let f = g.nvlink.as_ref()?.fabric.as_ref().ok()?;
        f.names_a_domain().then(|| {
            format!(
                "GPU {} reports clique {} in cluster {}",
                g.index, f.clique_id, f.cluster_uuid
            )
        })
    })
}

/// A Grace-Blackwell tray GPU whose fabric is supported: such a GPU outside a domain reads NOT_SUPPORTED.
pub fn tray_gpu_with_fabric(facts: &NvmlFacts) -> Option<String> {
    facts.gpus.iter().find_map(|g| {
        let name = g.name.as_ref().ok()?;
        let f = g.nvlink.as_ref()?.fabric.as_ref().ok()?;
        (DOMAIN_ONLY_MODELS.iter().any(|m| name.contains(m))
            && f.state != FABRIC_STATE_NOT_SUPPORTED)
            .then(|| {
                format!(
                    "GPU {} is an {name} with fabric state {} (one outside an NVLink domain reads not supported)",
                    g.index,
                    f.state_name()
                )
            })
    })
}

/// The IMEX daemon's configuration as far as this tool reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImexConfig {
    /// `IMEX_NODE_CONFIG_FILE` (default [`IMEX_NODES_CONFIG`]).
    pub node_file: String,
    /// The node list: one IP address or host name a line, comments and blank lines dropped.
    pub nodes: Vec<String>,
    /// `IMEX_CMD_PORT` / `IMEX_CMD_ENABLED`: whether `nvidia-imex-ctl` can ask the daemon.
    pub cmd_enabled: Option<bool>,
}

impl ImexConfig {
    /// `None` when neither file exists; read errors of a present file are errors.
    pub fn read(host: &Host) -> Result<Option<ImexConfig>, ReadError> {
        let mut config = ImexConfig {
            node_file: IMEX_NODES_CONFIG.to_string(),
            ..ImexConfig::default()
        };
        let main = host::optional(host.read(IMEX_CONFIG))?;
        // A line that is neither a comment nor KEY=VALUE is no config.cfg the daemon wrote: not read.
        if let Some(bad) = main.iter().flat_map(|t| t.lines()).find(|l| {
            let l = l.split('#').next().unwrap_or("").trim();
            !l.is_empty() && !l.contains('=')
        }) {
            return Err(ReadError::malformed(
                IMEX_CONFIG,
                format!("not KEY=VALUE: {bad:?}"),
            ));
        }
        for (key, value) in main.iter().flat_map(|t| t.lines()).filter_map(key_value) {
            match key {
                "IMEX_NODE_CONFIG_FILE" if !value.is_empty() => config.node_file = value.into(),
                "IMEX_CMD_ENABLED" => config.cmd_enabled = Some(value == "1"),
                _ => {}
            }
        }
        let nodes = host::optional(host.read(&config.node_file))?;
        if main.is_none() && nodes.is_none() {
            return Ok(None);
        }
        config.nodes = nodes
            .iter()
            .flat_map(|t| t.lines())
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        Ok(Some(config))
    }
}

/// `KEY=VALUE`, comments dropped.
fn key_value(line: &str) -> Option<(&str, &str)> {
    let line = line.split('#').next()?.trim();
    let (k, v) = line.split_once('=')?;
    Some((k.trim(), v.trim()))
}

/// An IMEX node list with addresses in it: the nvidia-imex package installs its files on nodes of every kind,
/// so the files alone place no node in a domain; a list someone filled does.
pub fn imex_configured(host: &Host) -> Result<Option<String>, ReadError> {
    let Some(config) = ImexConfig::read(host)? else {
        return Ok(None);
    };
    Ok((!config.nodes.is_empty()).then(|| {
        format!(
            "the IMEX node list {} names {} node(s)",
            config.node_file,
            config.nodes.len()
        )
    }))
}

/// A CDI spec of the DRA driver's ComputeDomain (IMEX run per domain by Kubernetes, no host service).
/// A directory that cannot be listed is an error, never "no ComputeDomain".
pub fn compute_domain(host: &Host) -> Result<Option<String>, ReadError> {
    for dir in CDI_DIRS {
        let names = host::optional(host.read_dir(dir))?.unwrap_or_default();
        if let Some(n) = names
            .into_iter()
            .find(|n| n.contains(COMPUTE_DOMAIN_DRIVER))
        {
            return Ok(Some(format!("ComputeDomain CDI spec {dir}/{n}")));
        }
    }
    Ok(None)
}

/// Why gpu.nvlink takes the node to be in a domain: the profile, NVML, a domain-only GPU model, or IMEX set up.
/// A file that could not be read is an error, never "not in a domain".
pub fn evidence(
    facts: &NvmlFacts,
    profile: Option<bool>,
    host: &Host,
) -> Result<Option<String>, ReadError> {
    if profile == Some(true) {
        return Ok(Some(
            "the profile expects a multi-node NVLink domain (expect.nvlink_domain)".into(),
        ));
    }
    if let Some(why) = named_by_nvml(facts).or_else(|| tray_gpu_with_fabric(facts)) {
        return Ok(Some(why));
    }
    if let Some(why) = imex_configured(host)? {
        return Ok(Some(why));
    }
    compute_domain(host)
}
