//! Profiles: what a node type is expected to look like (`checks/*.yaml`, embedded, or a file given by path).
//!
//! Loading is two steps. Each file is first parsed on its own into the typed [`Profile`] (unknown keys and
//! wrong types are refused there, with file, line and column). Then the `extends` chain is merged as YAML
//! values, child over parent, and the merged value is deserialized once more. The loader knows check ids only
//! as a list handed in by the caller.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};

use crate::model::Limit;
use crate::rules::topology::PcieDistance;

/// Built-in profiles, in the order `profiles` lists them.
pub const BUILTIN: &[(&str, &str)] = &[
    ("generic", include_str!("../checks/generic.yaml")),
    ("gpu-only", include_str!("../checks/gpu-only.yaml")),
    ("hgx-h100-ib", include_str!("../checks/hgx-h100-ib.yaml")),
    ("hgx-h200-ib", include_str!("../checks/hgx-h200-ib.yaml")),
    ("dgx-a100-hdr", include_str!("../checks/dgx-a100-hdr.yaml")),
    ("roce-400g", include_str!("../checks/roce-400g.yaml")),
    ("p5.48xlarge", include_str!("../checks/p5.48xlarge.yaml")),
    ("p5e.48xlarge", include_str!("../checks/p5e.48xlarge.yaml")),
    (
        "p5en.48xlarge",
        include_str!("../checks/p5en.48xlarge.yaml"),
    ),
    ("p4d.24xlarge", include_str!("../checks/p4d.24xlarge.yaml")),
    (
        "Standard_ND96isr_H100_v5",
        include_str!("../checks/Standard_ND96isr_H100_v5.yaml"),
    ),
    (
        "Standard_ND96isr_H200_v5",
        include_str!("../checks/Standard_ND96isr_H200_v5.yaml"),
    ),
    (
        "a3-ultragpu-8g",
        include_str!("../checks/a3-ultragpu-8g.yaml"),
    ),
    ("hgx-b200-ib", include_str!("../checks/hgx-b200-ib.yaml")),
    ("hgx-b300-ib", include_str!("../checks/hgx-b300-ib.yaml")),
    (
        "gb200-nvl72-ib",
        include_str!("../checks/gb200-nvl72-ib.yaml"),
    ),
    (
        "gb200-nvl72-roce",
        include_str!("../checks/gb200-nvl72-roce.yaml"),
    ),
    (
        "gb300-nvl72-ib",
        include_str!("../checks/gb300-nvl72-ib.yaml"),
    ),
    (
        "gb300-nvl72-roce",
        include_str!("../checks/gb300-nvl72-roce.yaml"),
    ),
    ("gh200", include_str!("../checks/gh200.yaml")),
    (
        "p6-b200.48xlarge",
        include_str!("../checks/p6-b200.48xlarge.yaml"),
    ),
    (
        "p6e-gb200.36xlarge",
        include_str!("../checks/p6e-gb200.36xlarge.yaml"),
    ),
    (
        "Standard_ND128isr_NDR_GB200_v6",
        include_str!("../checks/Standard_ND128isr_NDR_GB200_v6.yaml"),
    ),
    (
        "a4-highgpu-8g",
        include_str!("../checks/a4-highgpu-8g.yaml"),
    ),
    (
        "a4x-highgpu-4g",
        include_str!("../checks/a4x-highgpu-4g.yaml"),
    ),
    (
        "a3-megagpu-8g",
        include_str!("../checks/a3-megagpu-8g.yaml"),
    ),
];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<String>,
    /// Per check id: whether it runs, whether it is required, its deadline.
    #[serde(default)]
    pub checks: BTreeMap<String, CheckSettings>,
    #[serde(default)]
    pub expect: Expect,
    #[serde(default)]
    pub thresholds: Thresholds,
    /// Where the profile came from (`builtin:generic` or a path), for reports.
    #[serde(skip)]
    pub source: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSettings {
    /// `false` leaves the check out of the run.
    pub enabled: Option<bool>,
    /// A required check that is skipped (hardware absent) fails instead.
    pub required: Option<bool>,
    /// Deadline in seconds, overriding the probe's default.
    #[serde(default, deserialize_with = "checked_timeout")]
    pub timeout: Option<f64>,
}

/// The longest deadline accepted, for a check or a run: a preflight that needs more than a day is wedged, and
/// larger values overflow the clock arithmetic.
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// `secs` as a deadline, or why it is not one (zero, negative, not a number, or more than a day).
pub fn timeout_duration(secs: f64) -> Result<std::time::Duration, String> {
    if secs.is_finite() && secs > 0.0 && secs <= MAX_TIMEOUT_SECS {
        Ok(std::time::Duration::from_secs_f64(secs))
    } else {
        Err(format!(
            "must be more than 0 and at most {MAX_TIMEOUT_SECS} seconds (one day), got {secs}"
        ))
    }
}

/// Refused while parsing, so the error carries the file, line and column of the bad value.
fn checked_timeout<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let Some(secs) = Option::<f64>::deserialize(d)? else {
        return Ok(None);
    };
    timeout_duration(secs)
        .map(|_| Some(secs))
        .map_err(|e| serde::de::Error::custom(format!("timeout {e}")))
}

/// Node-wide expectations. Every key is optional: an unset key is not judged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub gpu_count: Option<u32>,
    /// Substring of the NVML product name (`H100`, `H200`, `A100`).
    pub gpu_model: Option<String>,
    pub gpu_pcie_gen: Option<u8>,
    pub gpu_pcie_width: Option<u8>,
    pub gpu_bar1_min_mib: Option<u64>,
    /// Lowest acceptable driver version (`535.104.05`).
    #[serde(default, deserialize_with = "checked_version")]
    pub driver_min_version: Option<String>,
    /// Every GPU pair must be joined by NVLink (NVSwitch or direct).
    pub nvlink: Option<bool>,
    /// Active NVLink links each GPU must have (H100/H200 SXM 18, A100 SXM 12).
    pub nvlinks_per_gpu: Option<u32>,
    /// The node belongs to a multi-node NVLink domain (GB200/GB300 NVL72 trays): every GPU's fabric must name a
    /// clique and a cluster, and IMEX is judged.
    pub nvlink_domain: Option<bool>,
    /// Speed of each active NVLink, GB/s as `nvidia-smi nvlink -s` prints it (NVLink5 53.125, NVLink4 26.562).
    #[serde(default, deserialize_with = "checked_rate")]
    pub nvlink_link_gbps: Option<f64>,
    pub rdma_device_count: Option<u32>,
    pub rdma_port_count: Option<u32>,
    pub rdma_link_layer: Option<LinkLayer>,
    #[serde(default, deserialize_with = "checked_rate")]
    pub rdma_min_rate_gbps: Option<f64>,
    /// Storage/frontend ports (RDMA ports that are not compute rails, see the README's NIC-role rule): how many
    /// must be ACTIVE, their link layer and lowest rate. Unset: a storage port need only be ACTIVE, and one that
    /// is down warns.
    pub storage_port_count: Option<u32>,
    pub storage_link_layer: Option<LinkLayer>,
    #[serde(default, deserialize_with = "checked_rate")]
    pub storage_min_rate_gbps: Option<f64>,
    /// RoCE path MTU the netdevs must carry (4096 needs a netdev MTU of at least 4200).
    pub roce_mtu: Option<u32>,
    /// GPUDirect RDMA must be possible (peermem or DMA-BUF).
    pub gdr: Option<bool>,
    /// Specifically `nvidia_peermem`; DMA-BUF alone does not satisfy it.
    pub peermem: Option<bool>,
    /// GPUDirect Storage proper: `nvidia_fs` loaded or the PCI P2PDMA path ready; compat mode is a failure.
    pub gds: Option<bool>,
    pub memlock_min_mib: Option<u64>,
    pub memlock_unlimited: Option<bool>,
    pub iommu: Option<IommuExpect>,
    /// Farthest acceptable PCIe distance between a GPU and its nearest NIC.
    pub gpu_nic_max_distance: Option<PcieDistance>,
    /// Fail (instead of warn) when a GPU has no NIC within `gpu_nic_max_distance`.
    pub gpu_nic_distance_fails: Option<bool>,
    pub nccl_transport: Option<NcclExpect>,
    pub gds_file_size_mib: Option<u64>,
    /// AWS EFA devices the instance type has (P5/P5e 32, P5en 16, P4d 4).
    pub efa_device_count: Option<u32>,
    /// Link speed of each EFA, Gb/s, judged only where the driver reports the device's own speed.
    #[serde(default, deserialize_with = "checked_rate")]
    pub efa_link_gbps: Option<f64>,
    /// The cloud the profile is for, from DMI (`--profile auto`).
    pub cloud: Option<crate::sysfs::dmi::Cloud>,
    /// The EC2 instance type DMI's `product_name` shows (`p5en.48xlarge`), for `--profile auto`.
    pub instance_type: Option<String>,
    pub gds_block_size_kib: Option<u64>,
}

/// Warn/fail limits. Units are in the key names; the direction is fixed per key (bandwidth: a floor;
/// latency and error counts: a ceiling).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// Pinned host→device copy, GB/s (floor).
    #[serde(default, deserialize_with = "floor")]
    pub h2d_gbytes_per_sec: Option<Limit>,
    /// Pinned device→host copy, GB/s (floor).
    #[serde(default, deserialize_with = "floor")]
    pub d2h_gbytes_per_sec: Option<Limit>,
    /// Device→device copy between P2P peers, GB/s (floor).
    #[serde(default, deserialize_with = "floor")]
    pub d2d_gbytes_per_sec: Option<Limit>,
    /// GDR loopback bandwidth as a percentage of the port's negotiated rate (floor).
    #[serde(default, deserialize_with = "pct_floor")]
    pub gdr_bandwidth_pct_of_link: Option<Limit>,
    /// GDR loopback 8-byte RDMA WRITE latency, µs (ceiling).
    #[serde(default, deserialize_with = "ceiling")]
    pub gdr_latency_us: Option<Limit>,
    /// Host-memory RDMA loopback (rdma.loopback) WRITE and READ bandwidth as a percentage of the port's rate
    /// (floor; not judged on software devices, whose rate is a placeholder).
    #[serde(default, deserialize_with = "pct_floor")]
    pub rdma_bandwidth_pct_of_link: Option<Limit>,
    /// `pair`: RDMA WRITE/READ between two nodes as a percentage of the lower end's link rate (floor; not
    /// judged on software devices, whose rate is a placeholder).
    #[serde(default, deserialize_with = "pct_floor")]
    pub pair_bandwidth_pct_of_link: Option<Limit>,
    /// `pair`: SEND/RECV one-way latency p99, µs (ceiling).
    #[serde(default, deserialize_with = "ceiling")]
    pub pair_latency_us: Option<Limit>,
    /// cuFile sequential read, GB/s (floor).
    #[serde(default, deserialize_with = "floor")]
    pub gds_read_gbytes_per_sec: Option<Limit>,
    /// IB/RoCE error counters, count (ceiling).
    #[serde(default, deserialize_with = "ceiling")]
    pub rdma_error_count: Option<Limit>,
    /// GPU PCIe replay counter, count (ceiling).
    #[serde(default, deserialize_with = "ceiling")]
    pub pcie_replay_count: Option<Limit>,
    /// `collective`: NCCL bus bandwidth at the largest size, GB/s (floor), per collective and scope.
    pub nccl_busbw_gbytes_per_sec: Option<BusbwLimits>,
    /// PCIe AER corrected errors of a device on the GPU/NIC/NVMe paths, per hour since boot (ceiling).
    #[serde(default, deserialize_with = "ceiling")]
    pub pcie_aer_correctable_per_hour: Option<Limit>,
}

/// `collective`'s bus-bandwidth floors, per collective (nccl-tests' names without `_perf`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusbwLimits {
    pub all_reduce: Option<BusbwScopes>,
    pub all_gather: Option<BusbwScopes>,
    pub reduce_scatter: Option<BusbwScopes>,
    pub alltoall: Option<BusbwScopes>,
    pub sendrecv: Option<BusbwScopes>,
}

impl BusbwLimits {
    /// The collectives a profile can set floors for: the keys under `nccl_busbw_gbytes_per_sec`.
    pub const COLLECTIVES: [&'static str; 5] = [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "alltoall",
        "sendrecv",
    ];

    /// The limits of `collective` (`all_reduce`), None for a collective the profile cannot name.
    pub fn of(&self, collective: &str) -> Option<&BusbwScopes> {
        match collective {
            "all_reduce" => self.all_reduce.as_ref(),
            "all_gather" => self.all_gather.as_ref(),
            "reduce_scatter" => self.reduce_scatter.as_ref(),
            "alltoall" => self.alltoall.as_ref(),
            "sendrecv" => self.sendrecv.as_ref(),
            _ => None,
        }
    }
}

/// One collective's floors: all ranks on one node (NVLink), or across nodes (the NICs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusbwScopes {
    #[serde(default, deserialize_with = "floor")]
    pub single_node: Option<Limit>,
    #[serde(default, deserialize_with = "floor")]
    pub multi_node: Option<Limit>,
    /// One node with its traffic forced through its own NICs (`collective --mode nic-loopback`: SHM, P2P and
    /// NVLS off): the per-node floor cloud health checks gate on.
    #[serde(default, deserialize_with = "floor")]
    pub nic_loopback: Option<Limit>,
    /// One rail: a communicator of the GPUs at one local index, one per node (`collective --mode per-rail`).
    #[serde(default, deserialize_with = "floor")]
    pub per_rail: Option<Limit>,
}

impl BusbwScopes {
    /// The floor of `scope`, one of [`BusbwScopes::SCOPES`].
    pub fn get(&self, scope: &str) -> Option<Limit> {
        match scope {
            "single_node" => self.single_node,
            "multi_node" => self.multi_node,
            "nic_loopback" => self.nic_loopback,
            "per_rail" => self.per_rail,
            _ => None,
        }
    }
}

/// Which side of a limit is worse. Declared on each threshold key (`floor`, `pct_floor`, `ceiling`) and checked
/// while parsing, so a limit that judging would read backwards, or compare against NaN, never loads.
#[derive(Debug, Clone, Copy)]
enum Worse {
    /// A floor (bandwidth): below `fail` fails, so `warn >= fail`.
    Lower,
    /// A ceiling (latency, error counts): above `fail` fails, so `warn <= fail`.
    Higher,
}

fn floor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Limit>, D::Error> {
    checked_limit(d, Worse::Lower, f64::MAX)
}

/// A floor in percent of a link's rate: above 100 nothing could pass.
fn pct_floor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Limit>, D::Error> {
    checked_limit(d, Worse::Lower, 100.0)
}

fn ceiling<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Limit>, D::Error> {
    checked_limit(d, Worse::Higher, f64::MAX)
}

/// Both sides finite, in `0..=max`, and in the order `worse` gives.
fn checked_limit<'de, D: serde::Deserializer<'de>>(
    d: D,
    worse: Worse,
    max: f64,
) -> Result<Option<Limit>, D::Error> {
    let Some(limit) = Option::<Limit>::deserialize(d)? else {
        return Ok(None);
    };
    let range = if max == f64::MAX {
        "a finite number, 0 or more".to_string()
    } else {
        format!("a number from 0 to {max}")
    };
    for (side, value) in [("warn", limit.warn), ("fail", limit.fail)] {
        if let Some(v) = value.filter(|v| !(0.0..=max).contains(v)) {
            return Err(serde::de::Error::custom(format!(
                "{side} must be {range}, got {v}"
            )));
        }
    }
    if let (Some(warn), Some(fail)) = (limit.warn, limit.fail) {
        let (in_order, rule) = match worse {
            Worse::Lower => (
                warn >= fail,
                "lower is worse, so warn must be at least fail",
            ),
            Worse::Higher => (
                warn <= fail,
                "higher is worse, so warn must be at most fail",
            ),
        };
        if !in_order {
            return Err(serde::de::Error::custom(format!(
                "{rule} (warn {warn}, fail {fail})"
            )));
        }
    }
    Ok(Some(limit))
}

/// A minimum rate in Gb/s: NaN or a negative floor would pass every port.
fn checked_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let rate = Option::<f64>::deserialize(d)?;
    match rate {
        Some(r) if !(r.is_finite() && r > 0.0) => Err(serde::de::Error::custom(format!(
            "must be a rate in Gb/s more than 0, got {r}"
        ))),
        _ => Ok(rate),
    }
}

/// A dotted version (`535.104.05`): the comparison reads a field that is not a number as 0, so `abc` would
/// accept every driver.
fn checked_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let version = Option::<String>::deserialize(d)?;
    if let Some(v) = &version {
        let dotted_numbers = v
            .split('.')
            .all(|field| !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit()));
        if !dotted_numbers {
            return Err(serde::de::Error::custom(format!(
                "must be a dotted version like 535.104.05, got {v:?}"
            )));
        }
    }
    Ok(version)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkLayer {
    Infiniband,
    Ethernet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IommuExpect {
    /// No IOMMU or passthrough (`identity` groups): what GDS and GDR want.
    Passthrough,
    /// Translated DMA is acceptable.
    Any,
}

/// The transport a NCCL job must have used (`nccl --expect`, `expect.nccl_transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum NcclExpect {
    /// IB, OFI or another (non-socket) plugin with GDRDMA on every NET channel.
    Gdrdma,
    IbGdrdma,
    OfiGdrdma,
    /// A plugin neither IB/RoCE verbs, libfabric nor sockets (GPUDirect-TCPX/TCPXO, vendors' own), with GDRDMA.
    PluginGdrdma,
    Ib,
    Ofi,
    Plugin,
    Socket,
    Any,
}

impl Profile {
    pub fn settings(&self, id: &str) -> CheckSettings {
        self.checks.get(id).cloned().unwrap_or_default()
    }
}

/// A profile that could not be loaded. `Display` gives `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    pub file: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "profile {}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ProfileError {}

/// Where a profile's text comes from.
struct Source {
    /// `builtin:generic` or the path as given.
    label: String,
    text: String,
    /// Directory that relative `extends` paths are resolved against.
    dir: Option<PathBuf>,
    /// What the chain compares to find a loop: the canonical path of a file (`a/../a/p.yaml` is `a/p.yaml`),
    /// the label of a built-in or of text handed in.
    identity: PathBuf,
}

/// Loads `name_or_path` (a built-in name or a YAML file) and its `extends` chain. `known_checks` are the ids
/// the registry has; a `checks:` key outside it is an error.
pub fn load(name_or_path: &str, known_checks: &[&str]) -> Result<Profile, ProfileError> {
    load_chain(find(name_or_path, None)?, known_checks)
}

/// Loads a profile from YAML `text` labelled `label` in errors (the fuzz target's entry; `extends` names a
/// built-in profile or a path relative to the working directory).
pub fn load_text(label: &str, text: &str, known_checks: &[&str]) -> Result<Profile, ProfileError> {
    let source = Source {
        label: label.to_string(),
        text: text.to_string(),
        dir: None,
        identity: PathBuf::from(label),
    };
    load_chain(source, known_checks)
}

/// The longest `extends` chain: site over fleet over vendor is three; more is a mistake, not a design.
const MAX_EXTENDS: usize = 16;

/// Parses `first` and every profile its `extends` chain names, then merges them child over parent.
fn load_chain(first: Source, known_checks: &[&str]) -> Result<Profile, ProfileError> {
    let mut chain: Vec<(Source, Value)> = Vec::new();
    let mut next = Some(first);
    while let Some(source) = next.take() {
        let (profile, value) = parse_one(&source, known_checks)?;
        next = match profile.extends.as_deref() {
            None => None,
            Some(parent) => {
                let at_extends = |message: String| source.error_at_key("extends", message);
                let parent_source = find(parent, source.dir.as_deref())
                    .map_err(|e| at_extends(format!("extends {parent}: {}", e.message)))?;
                if parent_source.identity == source.identity
                    || chain
                        .iter()
                        .any(|(s, _)| s.identity == parent_source.identity)
                {
                    return Err(at_extends(format!(
                        "extends {parent}: loops back to a profile already in the chain"
                    )));
                }
                if chain.len() + 2 > MAX_EXTENDS {
                    return Err(at_extends(format!(
                        "extends {parent}: chain longer than {MAX_EXTENDS} profiles"
                    )));
                }
                Some(parent_source)
            }
        };
        chain.push((source, value));
    }
    let label = chain[0].0.label.clone();
    let mut merged = Value::Mapping(Mapping::new());
    for (_, value) in chain.into_iter().rev() {
        merge(&mut merged, value);
    }
    let mut profile: Profile = serde_yaml::from_value(merged).map_err(|e| ProfileError {
        file: label.clone(),
        line: None,
        column: None,
        key: None,
        message: format!("merged profile is invalid: {e}"),
    })?;
    profile.extends = None;
    profile.source = label;
    Ok(profile)
}

fn find(reference: &str, base_dir: Option<&Path>) -> Result<Source, ProfileError> {
    let looks_like_path =
        reference.contains('/') || reference.ends_with(".yaml") || reference.ends_with(".yml");
    if !looks_like_path {
        if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == reference) {
            return Ok(Source {
                label: format!("builtin:{name}"),
                text: text.to_string(),
                dir: None,
                identity: PathBuf::from(format!("builtin:{name}")),
            });
        }
    }
    let path = match base_dir {
        Some(dir) if Path::new(reference).is_relative() => dir.join(reference),
        _ => PathBuf::from(reference),
    };
    match read_capped(&path) {
        Ok(text) => Ok(Source {
            label: path.display().to_string(),
            text,
            dir: path.parent().map(Path::to_path_buf),
            identity: std::fs::canonicalize(&path).unwrap_or(path),
        }),
        Err(e) => {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            Err(ProfileError {
                file: reference.to_string(),
                line: None,
                column: None,
                key: None,
                message: if looks_like_path {
                    format!("cannot read: {e}")
                } else {
                    format!(
                        "no built-in profile of that name (built-in: {})",
                        names.join(", ")
                    )
                },
            })
        }
    }
}

/// Profiles are a few KiB; `extends: /dev/zero` or a log passed by mistake must not be read to the end.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

fn read_capped(path: &Path) -> Result<String, crate::input::InputError> {
    crate::input::read_text(path, MAX_PROFILE_BYTES)
}

/// The deepest nesting a profile may have: the built-ins need 4, and the YAML parser takes time quadratic in
/// depth, so a 1 MiB file of `[[[…` would take minutes.
const MAX_NESTING: usize = 64;

/// The keys a profile has at its top level; a file with none of them is not a profile.
const PROFILE_KEYS: &[&str] = &[
    "name",
    "description",
    "extends",
    "checks",
    "expect",
    "thresholds",
];

impl Source {
    fn error(&self, line: Option<usize>, key: Option<String>, message: String) -> ProfileError {
        ProfileError {
            file: self.label.clone(),
            line,
            column: None,
            key,
            message,
        }
    }

    /// An error about `key`, at the line that sets it.
    fn error_at_key(&self, key: &str, message: String) -> ProfileError {
        let line = line_of_key(&self.text, key).map(|(line, _)| line);
        self.error(line, Some(key.to_string()), message)
    }
}

fn parse_one(source: &Source, known_checks: &[&str]) -> Result<(Profile, Value), ProfileError> {
    if let Some(line) = nesting_beyond(&source.text, MAX_NESTING) {
        return Err(source.error(
            Some(line),
            None,
            format!("nesting deeper than {MAX_NESTING} levels"),
        ));
    }
    // As a plain value first: a file that is not a profile at all (`/etc/shadow`, a log, JSON of something
    // else) is refused without serde's message, which would quote its content.
    let value: Value = serde_yaml::from_str(&source.text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        // The YAML scanner's messages name a position and what it expected, never the text it read.
        source.error(line, None, format!("not valid YAML: {e}"))
    })?;
    let is_profile = value.as_mapping().is_some_and(|map| {
        map.keys()
            .any(|k| k.as_str().is_some_and(|k| PROFILE_KEYS.contains(&k)))
    });
    if !is_profile {
        return Err(source.error(
            None,
            None,
            format!(
                "not a profile: a profile is a YAML mapping with some of the keys {}",
                PROFILE_KEYS.join(", ")
            ),
        ));
    }
    let profile: Profile = serde_yaml::from_str(&source.text).map_err(|e| {
        let location = e.location();
        let mut message = e.to_string();
        let mut key = key_in_message(&message);
        // A value refused by its own check (a limit, a rate) comes with the path of its parent only, at the
        // position of its key: name that key.
        if let (Some(path), Some(location)) = (&key, &location) {
            let leaf = key_at(&source.text[location.index()..]);
            if let Some(leaf) = leaf.filter(|leaf| !path.ends_with(leaf.as_str())) {
                let full = format!("{path}.{leaf}");
                message = message.replacen(path.as_str(), &full, 1);
                key = Some(full);
            }
        }
        ProfileError {
            file: source.label.clone(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            key,
            message,
        }
    })?;
    for id in profile.checks.keys() {
        if !known_checks.contains(&id.as_str()) {
            let line = line_of_key(&source.text, id);
            return Err(ProfileError {
                file: source.label.clone(),
                line: line.map(|(l, _)| l),
                column: line.map(|(_, c)| c),
                key: Some(format!("checks.{id}")),
                message: format!("checks.{id}: unknown check id (see `fabric-preflight list`)"),
            });
        }
    }
    Ok((profile, value))
}

/// The 1-based line where `text` first nests deeper than `max`, counted without parsing: open flow brackets
/// (`[`, `{`), plus block levels (each deeper indentation, each `- ` before a line's content). Quoted strings
/// and comments are skipped. Cheap and linear, so it runs before the parser, whose time grows with depth.
fn nesting_beyond(text: &str, max: usize) -> Option<usize> {
    let mut flow = 0usize;
    let mut indents: Vec<usize> = Vec::new();
    let mut quote: Option<u8> = None;
    for (i, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let mut at = 0;
        if quote.is_none() && flow == 0 {
            let indent = bytes.iter().take_while(|&&b| b == b' ').count();
            let content = &bytes[indent..];
            if content.is_empty() || content[0] == b'#' {
                continue;
            }
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
            // `- - - x` nests one sequence per dash.
            at = indent;
            while bytes[at..].starts_with(b"- ") || &bytes[at..] == b"-" {
                at += 2.min(bytes.len() - at);
                while bytes.get(at) == Some(&b' ') {
                    at += 1;
                }
                indents.push(at);
            }
        }
        let mut previous = b' ';
        while at < bytes.len() {
            let b = bytes[at];
            match quote {
                Some(b'"') if b == b'\\' => at += 1,
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None => match b {
                    b'#' if previous == b' ' => break,
                    b'"' | b'\'' if b" :,[{-?".contains(&previous) => quote = Some(b),
                    b'[' | b'{' => flow += 1,
                    b']' | b'}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            if indents.len() + flow > max {
                return Some(i + 1);
            }
            previous = b;
            at += 1;
        }
        if indents.len() + flow > max {
            return Some(i + 1);
        }
    }
    None
}

/// serde reports unknown fields as "unknown field `x`" and paths as "a.b: ..."; pull out the key.
fn key_in_message(message: &str) -> Option<String> {
    if let Some(rest) = message.split("unknown field `").nth(1) {
        return rest.split('`').next().map(str::to_string);
    }
    let (path, _) = message.split_once(": ")?;
    (!path.contains(' ')).then(|| path.to_string())
}

/// The `key:` that `text` (the YAML from an error's position on) starts with.
fn key_at(text: &str) -> Option<String> {
    // A flow mapping's error points at its `{`.
    let text = text.trim_start_matches(['{', ' ', '"', '\'']);
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    let after = text[end..].trim_start_matches(['"', '\'']).trim_start();
    (end > 0 && after.starts_with(':')).then(|| text[..end].to_string())
}

/// 1-based line and column of `key:` in YAML text.
fn line_of_key(text: &str, key: &str) -> Option<(usize, usize)> {
    text.lines().enumerate().find_map(|(i, line)| {
        let trimmed = line.trim_start();
        let unquoted = trimmed.trim_start_matches(['"', '\'']);
        let after = unquoted.strip_prefix(key)?;
        after
            .trim_start_matches(['"', '\''])
            .trim_start()
            .starts_with(':')
            .then_some((i + 1, line.len() - trimmed.len() + 1))
    })
}

/// Child over parent: mappings merge key by key, anything else is replaced.
fn merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Mapping(base_map), Value::Mapping(overlay_map)) => {
            for (k, v) in overlay_map {
                match base_map.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        base_map.insert(k, v);
                    }
                }
            }
        }
        (base, Value::Null) if !base.is_null() => {}
        (base, overlay) => *base = overlay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["rdma.link", "gpu.copy_bandwidth", "gdr.kernel_path"];

    fn write(dir: &Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    #[test]
    fn every_builtin_loads() {
        let ids: Vec<&str> = crate::probes::all().iter().map(|p| p.id()).collect();
        for (name, _) in BUILTIN {
            let p = load(name, &ids).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&p.name, name);
            assert!(!p.description.is_empty(), "{name} has no description");
        }
    }

    /// The README promises failures on these keys: the node profiles that claim the hardware set them.
    #[test]
    fn node_profiles_set_the_promised_limits() {
        let ids: Vec<&str> = crate::probes::all().iter().map(|p| p.id()).collect();
        for name in ["hgx-h100-ib", "hgx-h200-ib", "dgx-a100-hdr"] {
            let p = load(name, &ids).unwrap();
            assert!(p.expect.driver_min_version.is_some(), "{name}");
            assert!(
                p.thresholds
                    .pcie_replay_count
                    .is_some_and(|l| l.fail.is_some()),
                "{name}"
            );
            if p.expect.gds == Some(true) {
                assert!(
                    p.thresholds
                        .gds_read_gbytes_per_sec
                        .is_some_and(|l| l.fail.is_some()),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn typo_key_names_file_line_column_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "site.yaml",
            "name: site\nexpect:\n  gpu_cuont: 8\n",
        );
        let err = load(&path, KNOWN).unwrap_err();
        assert_eq!(err.file, path);
        assert_eq!(err.line, Some(3));
        assert_eq!(err.column, Some(3));
        assert_eq!(err.key.as_deref(), Some("gpu_cuont"));
        assert!(
            err.to_string().contains("gpu_count"),
            "lists valid keys: {err}"
        );
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "site.yaml",
            "name: site\nexpect:\n  gpu_count: eight\n",
        );
        let err = load(&path, KNOWN).unwrap_err();
        assert_eq!(err.line, Some(3));
        assert!(err.to_string().contains("gpu_count"), "{err}");
    }

    #[test]
    fn unknown_check_id_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "site.yaml",
            "name: site\nchecks:\n  rdma.lnk:\n    required: true\n",
        );
        let err = load(&path, KNOWN).unwrap_err();
        assert_eq!(err.line, Some(3));
        assert_eq!(err.key.as_deref(), Some("checks.rdma.lnk"));
    }

    #[test]
    fn missing_file_is_reported() {
        let err = load("/nonexistent/site.yaml", KNOWN).unwrap_err();
        assert!(err.message.contains("cannot read"), "{err}");
    }

    #[test]
    fn unknown_builtin_lists_the_builtins() {
        let err = load("hgx-h900", KNOWN).unwrap_err();
        assert!(err.message.contains("generic"), "{err}");
    }

    #[test]
    fn extends_overrides_only_what_the_overlay_sets() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "base.yaml",
            "name: base\ndescription: b\nexpect:\n  gpu_count: 8\n  rdma_min_rate_gbps: 400\nthresholds:\n  h2d_gbytes_per_sec: {warn: 52, fail: 48}\nchecks:\n  rdma.link: {required: true, timeout: 5}\n",
        );
        let site = write(
            dir.path(),
            "site.yaml",
            "name: site\nextends: base.yaml\nexpect:\n  gpu_count: 4\nthresholds:\n  h2d_gbytes_per_sec: {fail: 40}\nchecks:\n  rdma.link: {timeout: 9}\n",
        );
        let p = load(&site, KNOWN).unwrap();
        assert_eq!(p.name, "site");
        assert_eq!(p.description, "b");
        assert_eq!(p.expect.gpu_count, Some(4));
        assert_eq!(p.expect.rdma_min_rate_gbps, Some(400.0));
        assert_eq!(
            p.thresholds.h2d_gbytes_per_sec,
            Some(Limit::new(Some(52.0), Some(40.0)))
        );
        assert_eq!(p.settings("rdma.link").required, Some(true));
        assert_eq!(p.settings("rdma.link").timeout, Some(9.0));
    }

    #[test]
    fn site_overlay_can_extend_a_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let site = write(dir.path(), "site.yaml", "name: site\nextends: generic\n");
        let ids: Vec<&str> = crate::probes::all().iter().map(|p| p.id()).collect();
        assert_eq!(load(&site, &ids).unwrap().name, "site");
    }

    #[test]
    fn extends_cycle_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", "name: a\nextends: b.yaml\n");
        let b = write(dir.path(), "b.yaml", "name: b\nextends: a.yaml\n");
        let err = load(&b, KNOWN).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("extends"));
    }

    #[test]
    fn bad_enum_value_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "s.yaml",
            "name: s\nexpect:\n  rdma_link_layer: infiniband2\n",
        );
        let err = load(&path, KNOWN).unwrap_err();
        assert_eq!(err.line, Some(3));
    }

    #[test]
    fn text_profile_extends_a_builtin() {
        let p = load_text(
            "inline.yaml",
            "name: inline\nextends: generic\nchecks:\n  rdma.link:\n    timeout: 2\n",
            KNOWN,
        )
        .unwrap();
        assert_eq!(p.source, "inline.yaml");
        assert_eq!(p.settings("rdma.link").timeout, Some(2.0));
        let e = load_text("inline.yaml", "checks: [", KNOWN).unwrap_err();
        assert_eq!(e.file, "inline.yaml");
    }

    #[test]
    fn endless_or_oversized_extends_file_is_refused_not_read_to_the_end() {
        let e = load_text("inline.yaml", "name: zero\nextends: /dev/zero\n", KNOWN).unwrap_err();
        assert!(
            e.message
                .contains("is a character device, not a regular file"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let big = write(dir.path(), "big.yaml", &"#".repeat((1 << 20) + 1));
        let e = load_text(
            "inline.yaml",
            &format!("name: big\nextends: {big}\n"),
            KNOWN,
        )
        .unwrap_err();
        assert!(e.message.contains("larger than 1 MiB"), "{e}");
    }

    #[test]
    fn nesting_counts_brackets_and_block_levels_but_not_quotes_or_comments() {
        let brackets = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(nesting_beyond(&brackets(63), 64), None);
        assert_eq!(nesting_beyond(&brackets(64), 64), Some(1));
        let quoted = format!(
            "name: n\ndescription: \"{0}\"\nexpect: '{0}' # {0}\n",
            "[".repeat(100)
        );
        assert_eq!(nesting_beyond(&quoted, 64), None);
        assert!(
            load_text("q.yaml", &quoted, KNOWN).is_err_and(|e| e.key.as_deref() == Some("expect"))
        );
        let dashes = format!("name: n\nexpect:\n{}x\n", "- ".repeat(70));
        assert_eq!(nesting_beyond(&dashes, 64), Some(3));
        for (_, text) in BUILTIN {
            assert_eq!(nesting_beyond(text, 8), None);
        }
    }

    #[test]
    fn a_text_just_under_the_nesting_bound_parses_quickly() {
        let text = format!(
            "name: n\ndescription: {}{}\n",
            "[".repeat(62),
            "]".repeat(62)
        );
        // CPU time of this thread, not wall time: what the parse costs, whatever else loads the machine.
        let cpu = || {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes the timespec it is given.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
        };
        let started = cpu();
        let e = load_text("n.yaml", &text, KNOWN).unwrap_err();
        assert!(e.message.contains("description"), "{e}");
        assert!(cpu() - started < std::time::Duration::from_millis(100));
    }

    #[test]
    fn zero_negative_and_huge_timeouts_are_refused_at_their_line() {
        for bad in ["0", "-5", "1e20", ".inf", ".nan", "86401"] {
            let text = format!("name: t\nchecks:\n  rdma.link:\n    timeout: {bad}\n");
            let e = load_text("t.yaml", &text, KNOWN).unwrap_err();
            assert_eq!(e.line, Some(4), "{bad}: {e}");
            assert!(
                e.message.contains("timeout must be more than 0"),
                "{bad}: {e}"
            );
        }
        let ok = "name: t\nchecks:\n  rdma.link:\n    timeout: 86400\n";
        assert!(load_text("t.yaml", ok, KNOWN).is_ok());
    }
}
