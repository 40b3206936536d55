//! `gds.config`: cufile.json judged against the host (nvidia-fs, P2PDMA prerequisites, local addresses), and
//! the directory under test (filesystem type, the udev record cuFile needs).

use std::net::IpAddr;

use crate::host::{optional, ReadError};
use crate::probe::{
    CheckResult, Context, Explain, FindingCode, Findings, Need, Probe, ProbeMeta, Remedy, Status,
};
use crate::rules::gds_p2pdma::{self, P2pdma};
use crate::rules::gds_target::{self, FsSupport, Target, TargetError};
use crate::sysfs::cufile_json::{self, ConfigError, CufileConfig};
use crate::sysfs::infiniband;
use crate::sysfs::modules::Modules;
use crate::sysfs::mountinfo;
use crate::sysfs::netaddr::{self, FIB_TRIE, IF_INET6};
use crate::sysfs::nvfs::NVFS_VERSION;
use crate::sysfs::stable;

pub struct GdsConfig;

const ID: &str = "gds.config";

/// Keys echoed as evidence (what an engineer asks for first when GDS is slow).
const ECHOED: &[&str] = &[
    "properties.allow_compat_mode",
    "properties.force_compat_mode",
    "properties.use_pci_p2pdma",
    "properties.use_poll_mode",
    "properties.poll_mode_max_size_kb",
    "properties.max_direct_io_size_kb",
    "properties.max_device_cache_size_kb",
    "properties.max_device_pinned_mem_size_kb",
    "properties.per_buffer_cache_size_kb",
    "properties.rdma_dev_addr_list",
    "execution.parallel_io",
    "execution.max_io_threads",
    "logging.dir",
    "logging.level",
    "profile.cufile_stats",
];

/// Environment variables that override the file.
const ENV_OVERRIDES: &[&str] = &[
    cufile_json::ENV_PATH,
    "CUFILE_ALLOW_COMPAT_MODE",
    "CUFILE_FORCE_COMPAT_MODE",
    "CUFILE_LOGFILE_PATH",
];

/// cuFile's per-filesystem client address lists: the key under `fs` and the mounts (GDS-capable, as
/// [`gds_target::classify`] tells them) it serves.
const FS_LISTS: &[(&str, &[&str])] = &[
    ("weka", &["wekafs"]),
    ("lustre", &["lustre"]),
    ("nfs", &["nfs", "nfs4"]),
    ("gpfs", &["gpfs"]),
    ("beegfs", &["beegfs"]),
];

const FIX_FS_LIST: &str =
    "list in fs.<fs>.rdma_dev_addr_list the IP addresses of this node's RDMA NICs that \
reach the filesystem (`ip -br addr`, `rdma link`), each on an ACTIVE port whose netdev is up";

const FIX_NVFS: &str = "install and load nvidia-fs (`nvidia-fs-dkms` / `nvidia-gds` matching the driver, then \
`modprobe nvidia_fs`), or on an open kernel module with CONFIG_PCI_P2PDMA and NVMe set `\"use_pci_p2pdma\": true`; \
set `\"allow_compat_mode\": false` on nodes that must never silently fall back";

const NOT_INSTALLED: FindingCode = FindingCode {
    code: "GDS101",
    title: "cuFile is not configured here: GPUDirect Storage is not installed",
    explanation: "A skip: cufile.json is missing, nvidia-fs is not loaded and the profile does not expect GDS.",
    step: None,
};
const CONFIG_MISSING: FindingCode = FindingCode {
    code: "GDS102",
    title: "cufile.json is missing: cuFile runs on its built-in defaults",
    explanation: "cuFile reads /etc/cufile.json (or CUFILE_ENV_PATH_JSON): without it cuFile runs on defaults, compat mode allowed. A failure when the profile expects GDS, else a warning. Install the GDS package's cufile.json.",
    step: Some(Remedy::Reconfigure),
};
const CONFIG_SYNTAX: FindingCode = FindingCode {
    code: "GDS103",
    title: "cufile.json cannot be parsed: cuFile falls back to its defaults",
    explanation: "A syntax error in cufile.json (the summary names line and column): cuFile ignores the whole file. `//` comments are fine, other non-JSON syntax is not.",
    step: Some(Remedy::Reconfigure),
};
const P2PDMA_UNREADY: FindingCode = FindingCode {
    code: "GDS104",
    title: "use_pci_p2pdma is set but the host lacks what PCI P2PDMA needs",
    explanation: "cufile.json asks for PCI P2PDMA (`use_pci_p2pdma`) but the host lacks a prerequisite (the open kernel module, CONFIG_PCI_P2PDMA, an NVMe driver that supports it), named in the summary.",
    step: Some(Remedy::Reconfigure),
};
const FORCE_COMPAT: FindingCode = FindingCode {
    code: "GDS105",
    title: "force_compat_mode is set: every cuFile read goes through host memory",
    explanation: "`properties.force_compat_mode` (or CUFILE_FORCE_COMPAT_MODE) forces POSIX reads bounced through host memory even where nvidia-fs is loaded.",
    step: Some(Remedy::Reconfigure),
};
const COMPAT_MODE: FindingCode = FindingCode {
    code: "GDS106",
    title: "compat mode: nvidia-fs is not loaded and cuFile falls back to POSIX reads",
    explanation: "allow_compat_mode is true and no direct path (nvidia-fs, PCI P2PDMA) is there: every cuFile read bounces through host memory. Load nvidia-fs.",
    step: Some(Remedy::LoadModule),
};
const DRIVER_OPEN_FAILS: FindingCode = FindingCode {
    code: "GDS107",
    title: "no nvidia-fs and compat mode disallowed: cuFileDriverOpen fails",
    explanation: "allow_compat_mode is false and no direct path is there: cuFileDriverOpen fails with CU_FILE_DRIVER_NOT_INITIALIZED (5001). Load nvidia-fs.",
    step: Some(Remedy::LoadModule),
};
const ADDR_NOT_LOCAL: FindingCode = FindingCode {
    code: "GDS108",
    title: "properties.rdma_dev_addr_list names addresses this node does not have",
    explanation: "cuFile's RDMA client addresses must be this node's RDMA NICs' IP addresses (`ip -br addr`), not device names or other nodes' addresses.",
    step: Some(Remedy::Reconfigure),
};
const FS_LIST_NOT_STRINGS: FindingCode = FindingCode {
    code: "GDS109",
    title: "fs.<fs>.rdma_dev_addr_list is not a list of address strings",
    explanation: "The per-filesystem address list (Lustre, WekaFS, GPFS, BeeGFS) must be a JSON list of IP address strings.",
    step: Some(Remedy::Reconfigure),
};
const FS_LIST_EMPTY: FindingCode = FindingCode {
    code: "GDS110",
    title: "fs.<fs>.rdma_dev_addr_list is empty or unset while that filesystem is mounted",
    explanation: "cuFile is given no client RDMA address for a mounted distributed filesystem: its GDS reads do not use RDMA.",
    step: Some(Remedy::Reconfigure),
};
const FS_LIST_BAD_ADDR: FindingCode = FindingCode {
    code: "GDS111",
    title: "an fs.<fs>.rdma_dev_addr_list entry is not an IP address",
    explanation: "Each entry of the per-filesystem address list must be an IP address.",
    step: Some(Remedy::Reconfigure),
};
const FS_LIST_PORT_DOWN: FindingCode = FindingCode {
    code: "GDS112",
    title: "an fs.<fs>.rdma_dev_addr_list address is on an RDMA port that is down",
    explanation: "The address is on an RDMA port or netdev that is down (the summary says why): cuFile's RDMA reads from that filesystem fail. Check the cable and the switch port.",
    step: Some(Remedy::ServiceRma),
};
const FS_LIST_ADDR_ABSENT: FindingCode = FindingCode {
    code: "GDS113",
    title: "an fs.<fs>.rdma_dev_addr_list address is on no interface of this node",
    explanation:
        "No interface of this node has the address: the list was written for another node.",
    step: Some(Remedy::Reconfigure),
};
const FS_LIST_MAYBE_IPOIB: FindingCode = FindingCode {
    code: "GDS114",
    title: "an fs.<fs>.rdma_dev_addr_list address is on no RoCE port; IPoIB may carry it",
    explanation: "The address is on no RoCE port's GID table; IPoIB netdevs exist and may carry it, which procfs does not tell.",
    step: Some(Remedy::Reconfigure),
};
const FS_LIST_NO_RDMA: FindingCode = FindingCode {
    code: "GDS115",
    title: "an fs.<fs>.rdma_dev_addr_list address is on an interface without RDMA",
    explanation: "No RDMA port's GID table has the address: cuFile cannot read that filesystem over RDMA through it.",
    step: Some(Remedy::Reconfigure),
};
const TARGET_NO_MOUNT: FindingCode = FindingCode {
    code: "GDS116",
    title: "no mount covers the GDS target directory",
    explanation: "The mount table has no entry that covers the directory (--gds-dir or the default): it cannot be judged.",
    step: Some(Remedy::Reconfigure),
};
const TARGET_NO_DIRECT_IO: FindingCode = FindingCode {
    code: "GDS117",
    title: "the GDS target's filesystem does not support O_DIRECT",
    explanation: "cuFile cannot open files there with O_DIRECT: pass --gds-dir DIR on the filesystem the workload reads.",
    step: Some(Remedy::Reconfigure),
};
const TARGET_COMPAT_ONLY: FindingCode = FindingCode {
    code: "GDS118",
    title: "the GDS target's filesystem supports cuFile's compat mode only",
    explanation: "cuFile reads files there through host memory: use ext4 or xfs on NVMe, or a GDS-capable distributed filesystem.",
    step: Some(Remedy::Reconfigure),
};
const TARGET_UNREGISTERED: FindingCode = FindingCode {
    code: "GDS119",
    title: "cuFile will refuse every file on the GDS target's device (cuFileHandleRegister 5027)",
    explanation: "The block device's udev record lacks what cuFile checks (ID_FS_USAGE), or cannot be read: cuFileHandleRegister fails with 5027, \"file descriptor is not registered\".",
    step: Some(Remedy::Reconfigure),
};
const TARGET_DENIED: FindingCode = FindingCode {
    code: "GDS120",
    title: "cufile.json's denylist excludes the GDS target's filesystem or mount",
    explanation: "denylist.filesystems or denylist.mounts names the target: cuFile reads it through host memory.",
    step: Some(Remedy::Reconfigure),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "cufile.json agrees with the host; the test directory's filesystem and udev record suit cuFile",
    needs: &[Need::Gpu],
    explain: Explain {
        reads: "cufile.json ($CUFILE_ENV_PATH_JSON or /etc/cufile.json, `//` comments allowed), /proc/modules, \
                /sys/module/nvidia_fs, /proc/driver/nvidia-fs/version, /proc/driver/nvidia/version (open module?), \
                /boot/config-<release> (CONFIG_PCI_P2PDMA), /sys/module/nvme, /proc/net/fib_trie and \
                /proc/net/if_inet6 (local addresses), /proc/self/mountinfo (filesystem of --gds-dir or $TMPDIR \
                or /tmp; mounted GDS filesystems), /run/udev/data/b<major>:<minor>; where a mounted filesystem's \
                fs.<fs>.rdma_dev_addr_list names addresses: the RDMA ports' GID tables \
                (/sys/class/infiniband/<dev>/ports/<n>/{gids,gid_attrs/ndevs}/<i>, state, phys_state), their \
                netdevs' operstate, IPoIB netdevs (/sys/class/infiniband/<dev>/device/net)",
        why: "With allow_compat_mode and no nvidia-fs, cuFile silently reads through host bounce buffers and \
              gdsio still labels the run GPU-direct. cuFile also refuses every file (5027, \"file descriptor is \
              not registered\") when the udev record of the block device lacks ID_FS_USAGE — the normal state \
              in a container without /run/udev. RDMA filesystems ignore rdma_dev_addr_list entries no \
              interface has; fs.<fs>.rdma_dev_addr_list names the client addresses cuFile uses to reach a mounted \
              RDMA filesystem (WekaFS, Lustre, NFS over RDMA, GPFS, BeeGFS), and an address no RDMA NIC of this \
              node carries, or one on a port that is down, sends no I/O over RDMA.",
        fixes: &[
            ("compat mode: no nvidia-fs", FIX_NVFS),
            ("use_pci_p2pdma without its prerequisites", gds_p2pdma::FIX),
            ("rdma_dev_addr_list names an address no interface has", "list the IP addresses of this node's RDMA NICs (`ip -br addr`), not device names"),
            ("fs.<fs>.rdma_dev_addr_list: an address on no RDMA NIC, on a down port, or the list empty", FIX_FS_LIST),
            ("udev record missing", "containers: `-v /run/udev:/run/udev:ro`; hosts without udev: create /run/udev/data/b<maj>:<min> with E:ID_FS_USAGE=filesystem"),
            ("filesystem without GDS support", "point --gds-dir at ext4/xfs on NVMe, or Lustre/WekaFS/GPFS/BeeGFS/NFS over RDMA"),
        ],
    },
    findings: &[
        &NOT_INSTALLED,
        &CONFIG_MISSING,
        &CONFIG_SYNTAX,
        &P2PDMA_UNREADY,
        &FORCE_COMPAT,
        &COMPAT_MODE,
        &DRIVER_OPEN_FAILS,
        &ADDR_NOT_LOCAL,
        &FS_LIST_NOT_STRINGS,
        &FS_LIST_EMPTY,
        &FS_LIST_BAD_ADDR,
        &FS_LIST_PORT_DOWN,
        &FS_LIST_ADDR_ABSENT,
        &FS_LIST_MAYBE_IPOIB,
        &FS_LIST_NO_RDMA,
        &TARGET_NO_MOUNT,
        &TARGET_NO_DIRECT_IO,
        &TARGET_COMPAT_ONLY,
        &TARGET_UNREGISTERED,
        &TARGET_DENIED,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GdsConfig {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let path = cufile_json::config_path(cx.inputs.env(cufile_json::ENV_PATH));
        let config = cufile_json::read_config(cx.host, &path);
        let host = match HostFacts::read(cx, config.as_ref().ok()) {
            Ok(h) => h,
            Err(r) => return vec![*r],
        };
        let expect_gds = cx.profile.expect.gds == Some(true);

        if let Err(ConfigError::Read(e)) = &config {
            if e.is_not_found() && !host.nvfs_loaded && !expect_gds {
                return vec![CheckResult::skip(
                    ID,
                    format!("cuFile is not configured here ({path} missing, nvidia-fs not loaded): GPUDirect Storage not installed"),
                )
                .evidence(&path, e.reason()).code(&NOT_INSTALLED)];
            }
            // Unread, it may or may not be there: GDS is not known to be installed, so the target is not judged.
            if !host.nvfs_loaded && !expect_gds {
                return vec![CheckResult::read_error(ID, e).subject(&path)];
            }
        }
        // Only where GDS is installed or expected: the target's mount and udev record judge nothing otherwise.
        let target = gds_target::inspect(
            cx.host,
            &gds_target::target_dir(cx.inputs.gds_dir.as_deref(), cx.inputs.env("TMPDIR")),
        );
        let real_path = cx.host.canonical(&path).ok().filter(|real| real != &path);
        vec![
            judge_config(&path, real_path.as_deref(), &config, &host, expect_gds),
            judge_target(&target, config.as_ref().ok(), expect_gds),
        ]
    }
}

/// What the host offers, read once.
struct HostFacts {
    nvfs_loaded: bool,
    /// The PCI P2PDMA path (`gds_p2pdma`), read as gds.kernel_path reads it.
    p2pdma: P2pdma,
    local_addrs: std::collections::BTreeSet<IpAddr>,
    /// The per-filesystem address lists' facts (none without a parsed cufile.json).
    fs: FsFacts,
    evidence: Vec<String>,
    env: Vec<(String, String)>,
}

impl HostFacts {
    fn read(cx: &Context<'_>, config: Option<&CufileConfig>) -> Result<Self, Box<CheckResult>> {
        let unread = |e: ReadError| Box::new(CheckResult::read_error(ID, &e));
        let modules = Modules::read(cx.host).map_err(unread)?;
        let nvfs = modules.state(cx.host, "nvidia_fs").map_err(unread)?;
        let nvfs_version = optional(stable::read(cx.host, NVFS_VERSION)).map_err(unread)?;
        let p2pdma = P2pdma::read(cx.host, config).map_err(unread)?;
        let mut evidence: Vec<String> = nvfs.evidence();
        evidence.push(format!(
            "{NVFS_VERSION} = {}",
            nvfs_version.as_deref().unwrap_or("<missing>")
        ));
        evidence.extend(p2pdma.evidence.iter().cloned());
        let env = ENV_OVERRIDES
            .iter()
            .filter_map(|k| cx.inputs.env(k).map(|v| (k.to_string(), v.to_string())))
            .collect();
        let fs = match config {
            Some(c) => FsFacts::read(cx.host, c).map_err(unread)?,
            None => FsFacts::default(),
        };
        Ok(HostFacts {
            nvfs_loaded: nvfs.is_loaded() || nvfs_version.is_some(),
            p2pdma,
            // Read only where cufile.json lists addresses to check against them.
            local_addrs: if fs.listed
                || config.is_some_and(|c| {
                    c.strings("properties.rdma_dev_addr_list")
                        .is_some_and(|l| !l.is_empty())
                }) {
                netaddr::read_local_addresses(cx.host).map_err(unread)?
            } else {
                Default::default()
            },
            fs,
            evidence,
            env,
        })
    }

    fn env_bool(&self, key: &str) -> Option<bool> {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
    }
}

/// What the per-filesystem address lists ([`FS_LISTS`]) are judged against.
#[derive(Default)]
struct FsFacts {
    /// The GDS-capable mounts of each list's filesystem: (key under `fs`, mount points).
    mounted: Vec<(&'static str, Vec<String>)>,
    /// A mounted filesystem's list names addresses: the RDMA facts below were read.
    listed: bool,
    /// The addresses the RDMA ports' GID tables carry, each with its port and why it is not up (none when up).
    rdma: Vec<(infiniband::GidAddr, Option<String>)>,
    /// Netdevs of RDMA devices with an InfiniBand port (IPoIB): an address on one shows in no GID table.
    ipoib: Vec<String>,
}

impl FsFacts {
    fn read(host: &crate::host::Host, config: &CufileConfig) -> Result<FsFacts, ReadError> {
        let mounts = mountinfo::read_mounts_strict(host)?;
        let mut facts = FsFacts::default();
        // The addresses the mounted filesystems' lists name: only their ports' state is read.
        let mut listed: Vec<IpAddr> = Vec::new();
        for (key, types) in FS_LISTS {
            let points: Vec<String> = mounts
                .iter()
                .filter(|m| types.contains(&m.fs_type.as_str()))
                .filter(|m| gds_target::classify(m) == FsSupport::Distributed)
                .map(|m| m.mount_point.clone())
                .collect();
            if points.is_empty() {
                continue;
            }
            listed.extend(
                config
                    .get(&fs_list_key(key))
                    .and_then(|v| v.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str()?.parse::<IpAddr>().ok()),
            );
            facts.listed |= config
                .get(&fs_list_key(key))
                .and_then(|v| v.as_array())
                .is_some_and(|l| !l.is_empty());
            facts.mounted.push((key, points));
        }
        if !facts.listed {
            return Ok(facts);
        }
        for (dev, ports) in infiniband::read_all_ports(host)? {
            let ids: Vec<(String, u32)> = ports.iter().map(|p| (dev.clone(), p.port)).collect();
            for addr in infiniband::read_gid_addresses(host, &ids)? {
                if !listed.contains(&addr.ip) {
                    continue;
                }
                let p = ports
                    .iter()
                    .find(|p| p.port == addr.port)
                    .expect("a port listed");
                let mut down = (!(p.is_active() && p.is_link_up())).then(|| {
                    format!(
                        "port {}",
                        p.evidence()
                            .iter()
                            .take(2)
                            .map(|(_, v)| v.clone())
                            .collect::<Vec<_>>()
                            .join(" / ")
                    )
                });
                if let (None, Some(n)) = (&down, &addr.ndev) {
                    let state = crate::sysfs::net::read_operstate(host, n)?;
                    if state.trim() != "up" {
                        down = Some(format!("netdev {n} operstate {}", state.trim()));
                    }
                }
                facts.rdma.push((addr, down));
            }
            if ports.iter().any(|p| p.is_infiniband()) {
                let dir = format!("{}/device/net", infiniband::device_dir(&dev));
                facts
                    .ipoib
                    .extend(optional(host.read_dir(&dir))?.unwrap_or_default());
            }
        }
        Ok(facts)
    }
}

fn fs_list_key(fs: &str) -> String {
    format!("fs.{fs}.rdma_dev_addr_list")
}

/// The per-filesystem address lists ([`FS_LISTS`]): each judged only where its filesystem is mounted. An
/// address no RDMA NIC carries, or on a port or netdev that is down, fails; an empty or unset list beside the
/// mounted filesystem warns (cuFile is given no client RDMA address for it); a value that is not a list of
/// strings is named with its key. Returns the evidence lines.
fn judge_fs_lists(
    config: &CufileConfig,
    host: &HostFacts,
    findings: &mut Findings,
) -> Vec<(String, String)> {
    let mut evidence = Vec::new();
    for (fs, types) in FS_LISTS {
        let key = fs_list_key(fs);
        let value = config.get(&key);
        let mounted = host.fs.mounted.iter().find(|(k, _)| k == fs);
        let list: Option<Result<Vec<&str>, String>> = value.map(|v| match v.as_array() {
            Some(items) => items
                .iter()
                .map(|i| i.as_str().ok_or_else(|| v.to_string()))
                .collect(),
            None => Err(v.to_string()),
        });
        let Some((_, points)) = mounted else {
            if let Some(v) = value {
                evidence.push((
                    format!("cufile.json [{key}]"),
                    format!("{v} (not judged: no {} mounted)", types.join("/")),
                ));
            }
            if let Some(Err(v)) = &list {
                findings.coded(&FS_LIST_NOT_STRINGS).warn(
                    format!("{key} is not a list of address strings: {v}"),
                    FIX_FS_LIST,
                );
            }
            continue;
        };
        let at = points.join(", ");
        evidence.push((
            format!("cufile.json [{key}]"),
            format!(
                "{} ({} mounted at {at})",
                value.map_or("<unset>".to_string(), |v| v.to_string()),
                types.join("/")
            ),
        ));
        let addrs = match list {
            Some(Err(v)) => {
                findings.coded(&FS_LIST_NOT_STRINGS).fail(
                    format!("{key} is not a list of address strings: {v}"),
                    FIX_FS_LIST,
                );
                continue;
            }
            Some(Ok(a)) if !a.is_empty() => a,
            _ => {
                findings.coded(&FS_LIST_EMPTY).warn(
                    format!(
                        "{key} is {} while {fs} is mounted at {at}: cuFile is given no client RDMA address for it",
                        if value.is_some() { "empty" } else { "unset" }
                    ),
                    FIX_FS_LIST,
                );
                continue;
            }
        };
        for a in addrs {
            let Ok(ip) = a.parse::<IpAddr>() else {
                findings
                    .coded(&FS_LIST_BAD_ADDR)
                    .fail(format!("{key}: {a} is not an IP address"), FIX_FS_LIST);
                continue;
            };
            let on: Vec<&(infiniband::GidAddr, Option<String>)> =
                host.fs.rdma.iter().filter(|(g, _)| g.ip == ip).collect();
            let name = |g: &infiniband::GidAddr| match &g.ndev {
                Some(n) => format!("{}/{} ({n})", g.device, g.port),
                None => format!("{}/{}", g.device, g.port),
            };
            if let Some((g, _)) = on.iter().find(|(_, down)| down.is_none()) {
                evidence.push((format!("{key} {a}"), format!("on {}, up", name(g))));
            } else if let Some((g, Some(why))) = on.first() {
                findings.coded(&FS_LIST_PORT_DOWN).fail(
                    format!("{key}: {a} is on {}, which is down ({why})", name(g)),
                    FIX_FS_LIST,
                );
            } else if !host.local_addrs.contains(&ip) {
                findings.coded(&FS_LIST_ADDR_ABSENT).fail(
                    format!("{key}: {a}: no interface of this node has it"),
                    FIX_FS_LIST,
                );
            } else if !host.fs.ipoib.is_empty() {
                findings.coded(&FS_LIST_MAYBE_IPOIB).warn(
                    format!(
                        "{key}: {a} is on no RoCE port; IPoIB netdevs ({}) may carry it, which procfs does not tell",
                        host.fs.ipoib.join(", ")
                    ),
                    FIX_FS_LIST,
                );
            } else {
                findings.coded(&FS_LIST_NO_RDMA).fail(
                    format!("{key}: {a} is on an interface without RDMA (no RDMA port's GID table has it)"),
                    FIX_FS_LIST,
                );
            }
        }
    }
    evidence
}

/// `real_path`: where `path` leads, when it is a link.
fn judge_config(
    path: &str,
    real_path: Option<&str>,
    config: &Result<CufileConfig, ConfigError>,
    host: &HostFacts,
    expect_gds: bool,
) -> CheckResult {
    let bad = if expect_gds {
        Status::Fail
    } else {
        Status::Warn
    };
    let config = match config {
        Ok(c) => c,
        Err(ConfigError::Read(e)) if e.is_not_found() => {
            let mut r = CheckResult::new(
                ID,
                bad,
                format!("{path} missing: cuFile runs on built-in defaults (compat mode allowed)"),
            )
            .subject(path)
            .fix(format!("install the cufile.json of the GDS package at {path}, or point CUFILE_ENV_PATH_JSON at one")).code(&CONFIG_MISSING);
            r.evidence = host.evidence.clone();
            return r.evidence(path, e.reason());
        }
        Err(ConfigError::Read(e)) => return CheckResult::read_error(ID, e).subject(path),
        Err(ConfigError::Parse(e)) => {
            return CheckResult::fail(
                ID,
                format!("{path}:{e}: cuFile cannot parse it and falls back to defaults"),
            )
            .subject(path)
            .evidence(
                path,
                format!("<syntax error at line {}, column {}>", e.line, e.column),
            )
            .fix(format!(
                "fix the JSON at {path}:{}:{} (`//` comments are fine, other syntax is not)",
                e.line, e.column
            ))
            .code(&CONFIG_SYNTAX)
        }
    };

    let allow_compat = host
        .env_bool("CUFILE_ALLOW_COMPAT_MODE")
        .or(config.bool("properties.allow_compat_mode"))
        .unwrap_or(true);
    let force_compat = host
        .env_bool("CUFILE_FORCE_COMPAT_MODE")
        .or(config.bool("properties.force_compat_mode"))
        .unwrap_or(false);
    let mut findings = Findings::default();
    if host.p2pdma.requested && !host.p2pdma.ready() {
        findings.coded(&P2PDMA_UNREADY).add(
            bad,
            format!(
                "use_pci_p2pdma is true but the host lacks {}",
                host.p2pdma.missing.join(", ")
            ),
            gds_p2pdma::FIX,
        );
    }
    let direct_path = host.nvfs_loaded || host.p2pdma.ready();
    if force_compat {
        findings.coded(&FORCE_COMPAT).add(
            bad,
            "force_compat_mode is set: every cuFile read goes through host memory",
            "remove `force_compat_mode` from cufile.json and unset CUFILE_FORCE_COMPAT_MODE",
        );
    } else if !direct_path && allow_compat {
        findings.coded(&COMPAT_MODE).add(
            bad,
            "compat mode: allow_compat_mode is true and nvidia-fs is not loaded, so every cuFile read bounces through host memory (POSIX)",
            FIX_NVFS,
        );
    } else if !direct_path {
        findings.coded(&DRIVER_OPEN_FAILS).fail(
            "no nvidia-fs and allow_compat_mode is false: cuFileDriverOpen fails (CU_FILE_DRIVER_NOT_INITIALIZED, 5001)",
            FIX_NVFS,
        );
    }
    let addrs = config
        .strings("properties.rdma_dev_addr_list")
        .unwrap_or_default();
    let foreign: Vec<String> = addrs
        .iter()
        .filter_map(|a| match a.parse::<IpAddr>() {
            Ok(ip) if host.local_addrs.contains(&ip) => None,
            Ok(_) => Some(format!("{a} (no local interface has it)")),
            Err(_) => Some(format!("{a} (not an IP address)")),
        })
        .collect();
    if !foreign.is_empty() {
        findings.coded(&ADDR_NOT_LOCAL).warn(
            format!("rdma_dev_addr_list: {}", foreign.join(", ")),
            "list the IP addresses of this node's RDMA NICs (`ip -br addr`), not device names",
        );
    }
    let fs_evidence = judge_fs_lists(config, host, &mut findings);

    let summary = if findings.status() == Status::Pass {
        format!(
            "cuFile configured for the direct path ({}), compat fallback {}",
            if host.nvfs_loaded {
                "nvidia-fs"
            } else {
                "PCI P2PDMA"
            },
            if allow_compat {
                "allowed"
            } else {
                "disallowed"
            }
        )
    } else {
        findings.listed()
    };
    let mut r = CheckResult::pass(ID, summary).subject(path);
    if let Some(real) = real_path {
        r = r.evidence(&format!("{path} ->"), real);
    }
    r.evidence.extend(host.evidence.iter().cloned());
    for key in ECHOED {
        r = r.evidence(&format!("{path} [{key}]"), config.show(key));
    }
    for (k, v) in &host.env {
        r = r.evidence(&format!("env {k}"), v);
    }
    for (k, v) in fs_evidence {
        r = r.evidence(&k, v);
    }
    if !addrs.is_empty() || host.fs.listed {
        r = r.evidence(
            &format!("{FIB_TRIE} + {IF_INET6} (local addresses)"),
            host.local_addrs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    findings.apply(r)
}

fn judge_target(target: &Target, config: Option<&CufileConfig>, expect_gds: bool) -> CheckResult {
    let bad = if expect_gds {
        Status::Fail
    } else {
        Status::Warn
    };
    let mount = match &target.mount {
        Ok(m) => m,
        Err(TargetError::Unreadable(e)) => {
            return CheckResult::read_error(ID, e).subject(&target.dir)
        }
        Err(TargetError::NoMount) => {
            let mut r = CheckResult::error(
                ID,
                format!("no mount in the mount table covers {}", target.dir),
            )
            .subject(&target.dir)
            .code(&TARGET_NO_MOUNT);
            r.evidence = target.evidence();
            return r;
        }
    };
    let support = gds_target::classify(mount);
    let mut findings = Findings::default();
    match support {
        FsSupport::NoDirectIo => {
            findings.coded(&TARGET_NO_DIRECT_IO).add(bad, format!("{} is on {} ({}): cuFile cannot open files here with O_DIRECT", target.dir, mount.fs_type, support.as_str()), "pass --gds-dir DIR on the filesystem the workload reads (ext4/xfs on NVMe, or a GDS-capable distributed filesystem)");
        }
        FsSupport::CompatOnly => {
            findings.coded(&TARGET_COMPAT_ONLY).add(bad, format!("{} is on {}: {}", target.dir, mount.fs_type, support.as_str()), "use ext4 (data=ordered) or xfs on NVMe, or Lustre/WekaFS/GPFS/BeeGFS/NFS over RDMA (proto=rdma)");
        }
        FsSupport::LocalBlock | FsSupport::Distributed => {}
    }
    if let Some(p) = target.udev_problem() {
        // A record that exists but cannot be read is not known to lack ID_FS_USAGE: an error, whatever the profile.
        let unreadable = matches!(
            target.udev,
            Some(crate::sysfs::udev::BlockLookup::Unreadable(_))
        );
        findings.coded(&TARGET_UNREGISTERED).add(if unreadable { bad.max(Status::Error) } else { bad }, format!("{}: cuFile will refuse every file on {} (cuFileHandleRegister 5027, \"file descriptor is not registered\")", p.what, mount.source), p.fix);
    }
    if let Some(c) = config {
        let denied_fs = c.strings("denylist.filesystems").unwrap_or_default();
        let denied_mounts = c.strings("denylist.mounts").unwrap_or_default();
        if denied_fs.iter().any(|f| f == &mount.fs_type)
            || denied_mounts.iter().any(|m| m == &mount.mount_point)
        {
            findings.coded(&TARGET_DENIED).add(Status::Warn, format!("cufile.json denylist excludes {} ({})", mount.mount_point, mount.fs_type), "remove the entry from denylist.filesystems / denylist.mounts if this filesystem should use GDS");
        }
    }
    let summary = if findings.status() == Status::Pass {
        format!(
            "{} on {} ({}, dev {}): {}",
            target.dir,
            mount.fs_type,
            mount.source,
            mount.dev(),
            if target.udev.is_some() {
                format!("{}; udev record has ID_FS_USAGE", support.as_str())
            } else {
                support.as_str().to_string()
            }
        )
    } else {
        findings.listed()
    };
    let mut r = CheckResult::pass(ID, summary).subject(&target.dir);
    r.evidence = target.evidence();
    findings.apply(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Inputs;
    use crate::profile::Profile;
    use std::path::Path;

    const CUFILE: &str = "{\n // comment\n \"properties\": {\n  \"allow_compat_mode\": true,\n  \"use_pci_p2pdma\": false,\n  \"rdma_dev_addr_list\": [ ]\n }\n}\n";

    /// The H200 as seen on 2026-11-29: no nvidia-fs, open module, ext4 root on 254:0, no udev database.
    fn h200(dir: &Path, cufile: &str) {
        let w = |rel: &str, text: &str| {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(
            "proc/modules",
            "nvidia_uvm 1830912 - - Live 0x0 (O)\nnvidia 14299136 - - Live 0x0 (O)\n",
        );
        w("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n");
        w("proc/sys/kernel/osrelease", "6.18.44-fc-v657-gpu\n");
        w(
            "proc/self/mountinfo",
            "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n",
        );
        w("usr/local/cuda-13.0/gds/cufile.json", cufile);
        std::fs::create_dir_all(dir.join("etc/alternatives")).unwrap();
        std::os::unix::fs::symlink(
            "/usr/local/cuda-13.0/gds/cufile.json",
            dir.join("etc/alternatives/cufile.json"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/alternatives/cufile.json", dir.join("etc/cufile.json"))
            .unwrap();
    }

    fn run(root: &Path, profile: Profile, inputs: Inputs) -> Vec<CheckResult> {
        crate::probes::testing::run_with(&GdsConfig, root, &profile, &inputs)
    }

    #[test]
    fn h200_compat_mode_and_missing_udev_warn() {
        let d = tempfile::tempdir().unwrap();
        h200(d.path(), CUFILE);
        let r = run(d.path(), Profile::default(), Inputs::default());
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].status, Status::Warn, "{:?}", r[0]);
        assert!(r[0].summary.contains("compat mode"), "{}", r[0].summary);
        assert_eq!(r[0].subject.as_deref(), Some("/etc/cufile.json"));
        assert!(
            r[0].evidence
                .iter()
                .any(|e| e == "/etc/cufile.json -> = /usr/local/cuda-13.0/gds/cufile.json"),
            "{:?}",
            r[0].evidence
        );
        assert_eq!(r[1].status, Status::Warn, "{:?}", r[1]);
        assert!(
            r[1].summary.contains("/run/udev/data/b254:0"),
            "{}",
            r[1].summary
        );
        assert!(r[1]
            .remediation
            .as_deref()
            .unwrap()
            .contains("/run/udev:/run/udev:ro"));
    }

    #[test]
    fn gds_profile_fails_on_compat_mode() {
        let d = tempfile::tempdir().unwrap();
        h200(d.path(), CUFILE);
        let mut p = Profile::default();
        p.expect.gds = Some(true);
        let r = run(d.path(), p, Inputs::default());
        assert_eq!(r[0].status, Status::Fail);
        assert_eq!(r[1].status, Status::Fail);
    }

    #[test]
    fn udev_entry_present_passes_target() {
        let d = tempfile::tempdir().unwrap();
        h200(d.path(), CUFILE);
        std::fs::create_dir_all(d.path().join("run/udev/data")).unwrap();
        std::fs::write(
            d.path().join("run/udev/data/b254:0"),
            "E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n",
        )
        .unwrap();
        let r = run(d.path(), Profile::default(), Inputs::default());
        assert_eq!(r[1].status, Status::Pass, "{:?}", r[1]);
        assert!(r[1].summary.contains("ext4"));
    }

    #[test]
    fn p2pdma_without_prerequisites_and_foreign_addresses_are_named() {
        let d = tempfile::tempdir().unwrap();
        h200(d.path(), "{\"properties\": {\"use_pci_p2pdma\": true, \"allow_compat_mode\": false, \"rdma_dev_addr_list\": [\"10.9.9.9\", \"mlx5_0\"]}}");
        let r = run(d.path(), Profile::default(), Inputs::default());
        let s = &r[0].summary;
        assert!(
            s.contains("use_pci_p2pdma is true but the host lacks"),
            "{s}"
        );
        assert!(s.contains("CONFIG_PCI_P2PDMA"), "{s}");
        assert!(s.contains("5001"), "{s}");
        assert!(s.contains("10.9.9.9 (no local interface has it)"), "{s}");
        assert!(s.contains("mlx5_0 (not an IP address)"), "{s}");
        assert_eq!(r[0].status, Status::Fail);
    }

    #[test]
    fn syntax_error_names_line_and_column() {
        let d = tempfile::tempdir().unwrap();
        h200(
            d.path(),
            "{\n \"properties\": {\n  \"allow_compat_mode\" true\n }\n}\n",
        );
        let r = run(d.path(), Profile::default(), Inputs::default());
        assert_eq!(r[0].status, Status::Fail);
        assert!(
            r[0].summary.starts_with("/etc/cufile.json:3:"),
            "{}",
            r[0].summary
        );
    }

    #[test]
    fn env_path_override_is_followed() {
        let d = tempfile::tempdir().unwrap();
        h200(d.path(), CUFILE);
        std::fs::write(
            d.path().join("opt.json"),
            "{\"properties\": {\"allow_compat_mode\": false}}",
        )
        .unwrap();
        let mut inputs = Inputs::default();
        inputs
            .env
            .insert("CUFILE_ENV_PATH_JSON".into(), "/opt.json".into());
        let r = run(d.path(), Profile::default(), inputs);
        assert_eq!(r[0].subject.as_deref(), Some("/opt.json"));
        assert_eq!(r[0].status, Status::Fail);
    }

    #[test]
    fn tmpfs_target_is_refused() {
        let d = tempfile::tempdir().unwrap();
        h200(d.path(), CUFILE);
        std::fs::write(
            d.path().join("proc/self/mountinfo"),
            "22 1 254:0 / / rw - ext4 /dev/vda rw\n25 22 0:23 / /tmp rw - tmpfs tmpfs rw\n",
        )
        .unwrap();
        let r = run(d.path(), Profile::default(), Inputs::default());
        assert!(r[1].summary.contains("O_DIRECT"), "{}", r[1].summary);
    }

    #[test]
    fn no_gds_install_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        h200(d.path(), CUFILE);
        std::fs::remove_file(d.path().join("etc/cufile.json")).unwrap();
        let r = run(d.path(), Profile::default(), Inputs::default());
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, Status::Skip);
    }

    /// Issue 31 §9: `fs.<fs>.rdma_dev_addr_list` judged where its filesystem is mounted (the recorded WekaFS
    /// trees of gen_fleet_rdma.py): addresses on up RDMA ports pass; an address on an interface without RDMA
    /// or on none fails naming it; one on a down port fails naming the port; unmounted, the list is not judged.
    #[test]
    fn per_filesystem_address_lists_are_judged_where_mounted() {
        use crate::probes::testing::run_on;
        let r = run_on(&GdsConfig, "dgx-gds-weka", "hgx-h100-ib");
        assert_eq!(r[0].status, Status::Pass, "{:#?}", r[0]);
        assert!(
            r[0].evidence
                .iter()
                .any(|e| e.contains("10.0.9.1 = on mlx5_9/1 (enp209s0np0), up")),
            "{:#?}",
            r[0].evidence
        );
        for (tree, named) in [
            (
                "dgx-gds-weka-addr-no-rdma",
                &[
                    "10.0.7.1 is on an interface without RDMA",
                    "10.0.6.1: no interface of this node has it",
                ][..],
            ),
            (
                "dgx-gds-weka-addr-port-down",
                &["10.0.9.1 is on mlx5_9/1 (enp209s0np0), which is down"][..],
            ),
        ] {
            let r = run_on(&GdsConfig, tree, "hgx-h100-ib");
            assert_eq!(r[0].status, Status::Fail, "{tree}: {:#?}", r[0]);
            for n in named {
                assert!(r[0].summary.contains(n), "{tree}: {}", r[0].summary);
            }
            assert!(r[0]
                .remediation
                .as_deref()
                .unwrap()
                .contains("fs.<fs>.rdma_dev_addr_list"));
        }
        let r = run_on(&GdsConfig, "dgx-gds-weka-not-mounted", "hgx-h100-ib");
        assert_eq!(r[0].status, Status::Pass, "{:#?}", r[0]);
        assert!(
            r[0].evidence
                .iter()
                .any(|e| e.contains("(not judged: no wekafs mounted)")),
            "{:#?}",
            r[0].evidence
        );
    }

    /// An empty or unset list beside a mounted RDMA filesystem warns; a value that is not a list of strings is
    /// named with its key (a failure where mounted, a warning where not), never a panic.
    #[test]
    fn per_filesystem_lists_empty_unset_or_malformed() {
        let nfs = "30 22 0:60 / /mnt/nfs rw - nfs4 10.0.0.9:/export rw,vers=4.2,proto=rdma\n";
        for (fs_json, mounts, status, says) in [
            (
                "\"weka\": {\"rdma_dev_addr_list\": []}",
                "24 22 0:52 / /mnt/weka rw - wekafs w/default rw\n",
                Status::Warn,
                "fs.weka.rdma_dev_addr_list is empty while weka is mounted",
            ),
            (
                "\"weka\": {}",
                "24 22 0:52 / /mnt/weka rw - wekafs w/default rw\n",
                Status::Warn,
                "fs.weka.rdma_dev_addr_list is unset while weka is mounted",
            ),
            (
                "\"nfs\": {\"rdma_dev_addr_list\": \"10.0.0.1\"}",
                nfs,
                Status::Fail,
                "fs.nfs.rdma_dev_addr_list is not a list of address strings: \"10.0.0.1\"",
            ),
            (
                "\"lustre\": {\"rdma_dev_addr_list\": [1, null]}",
                "",
                Status::Warn,
                "fs.lustre.rdma_dev_addr_list is not a list of address strings: [1,null]",
            ),
            (
                "\"gpfs\": {\"rdma_dev_addr_list\": [\"mlx5_0\"]}",
                "24 22 0:52 / /gpfs rw - gpfs gpfs0 rw\n",
                Status::Fail,
                "fs.gpfs.rdma_dev_addr_list: mlx5_0 is not an IP address",
            ),
        ] {
            let d = tempfile::tempdir().unwrap();
            h200(
                d.path(),
                &format!(
                    "{{\"properties\": {{\"allow_compat_mode\": true}}, \"fs\": {{{fs_json}}}}}"
                ),
            );
            std::fs::write(
                d.path().join("proc/self/mountinfo"),
                format!("22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n{mounts}"),
            )
            .unwrap();
            std::fs::write(
                d.path().join("proc/modules"),
                "nvidia_fs 262144 0 - Live 0x0 (OE)\nnvidia 1 - - Live 0x0 (O)\n",
            )
            .unwrap();
            let r = run(d.path(), Profile::default(), Inputs::default());
            assert_eq!(r[0].status, status, "{fs_json}: {:#?}", r[0]);
            assert!(r[0].summary.contains(says), "{fs_json}: {}", r[0].summary);
        }
    }
}
