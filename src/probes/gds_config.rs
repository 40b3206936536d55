//! `gds.config`: cufile.json judged against the host (nvidia-fs, P2PDMA prerequisites, local addresses), and
//! the directory under test (filesystem type, the udev record cuFile needs).

use std::net::IpAddr;

use crate::gds_p2pdma::{self, P2pdma};
use crate::gds_target::{self, FsSupport, Target, TargetError};
use crate::host::{optional, ReadError};
use crate::probe::{CheckResult, Context, Explain, Findings, Need, Probe, ProbeMeta, Status};
use crate::sysfs::cufile_json::{self, ConfigError, CufileConfig};
use crate::sysfs::modules::Modules;
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

const FIX_NVFS: &str = "install and load nvidia-fs (`nvidia-fs-dkms` / `nvidia-gds` matching the driver, then \
`modprobe nvidia_fs`), or on an open kernel module with CONFIG_PCI_P2PDMA and NVMe set `\"use_pci_p2pdma\": true`; \
set `\"allow_compat_mode\": false` on nodes that must never silently fall back";

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "cufile.json agrees with the host; the test directory's filesystem and udev record suit cuFile",
    needs: &[Need::Gpu],
    explain: Explain {
        reads: "cufile.json ($CUFILE_ENV_PATH_JSON or /etc/cufile.json, `//` comments allowed), /proc/modules, \
                /sys/module/nvidia_fs, /proc/driver/nvidia-fs/version, /proc/driver/nvidia/version (open module?), \
                /boot/config-<release> (CONFIG_PCI_P2PDMA), /sys/module/nvme, /proc/net/fib_trie and \
                /proc/net/if_inet6 (local addresses), /proc/self/mountinfo (filesystem of --gds-dir or $TMPDIR \
                or /tmp), /run/udev/data/b<major>:<minor>",
        why: "With allow_compat_mode and no nvidia-fs, cuFile silently reads through host bounce buffers and \
              gdsio still labels the run GPU-direct. cuFile also refuses every file (5027, \"file descriptor is \
              not registered\") when the udev record of the block device lacks ID_FS_USAGE — the normal state \
              in a container without /run/udev. RDMA filesystems ignore rdma_dev_addr_list entries no \
              interface has.",
        fixes: &[
            ("compat mode: no nvidia-fs", FIX_NVFS),
            ("use_pci_p2pdma without its prerequisites", gds_p2pdma::FIX),
            ("rdma_dev_addr_list names an address no interface has", "list the IP addresses of this node's RDMA NICs (`ip -br addr`), not device names"),
            ("udev record missing", "containers: `-v /run/udev:/run/udev:ro`; hosts without udev: create /run/udev/data/b<maj>:<min> with E:ID_FS_USAGE=filesystem"),
            ("filesystem without GDS support", "point --gds-dir at ext4/xfs on NVMe, or Lustre/WekaFS/GPFS/BeeGFS/NFS over RDMA"),
        ],
    },
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
                .evidence(&path, e.reason())];
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
        Ok(HostFacts {
            nvfs_loaded: nvfs.is_loaded() || nvfs_version.is_some(),
            p2pdma,
            // Read only where cufile.json lists addresses to check against them.
            local_addrs: if config.is_some_and(|c| {
                c.strings("properties.rdma_dev_addr_list")
                    .is_some_and(|l| !l.is_empty())
            }) {
                netaddr::read_local_addresses(cx.host).map_err(unread)?
            } else {
                Default::default()
            },
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
            .fix(format!("install the cufile.json of the GDS package at {path}, or point CUFILE_ENV_PATH_JSON at one"));
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
        findings.add(
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
        findings.add(
            bad,
            "force_compat_mode is set: every cuFile read goes through host memory",
            "remove `force_compat_mode` from cufile.json and unset CUFILE_FORCE_COMPAT_MODE",
        );
    } else if !direct_path && allow_compat {
        findings.add(
            bad,
            "compat mode: allow_compat_mode is true and nvidia-fs is not loaded, so every cuFile read bounces through host memory (POSIX)",
            FIX_NVFS,
        );
    } else if !direct_path {
        findings.fail(
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
        findings.warn(
            format!("rdma_dev_addr_list: {}", foreign.join(", ")),
            "list the IP addresses of this node's RDMA NICs (`ip -br addr`), not device names",
        );
    }

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
    if !addrs.is_empty() {
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
            .subject(&target.dir);
            r.evidence = target.evidence();
            return r;
        }
    };
    let support = gds_target::classify(mount);
    let mut findings = Findings::default();
    match support {
        FsSupport::NoDirectIo => findings.add(bad, format!("{} is on {} ({}): cuFile cannot open files here with O_DIRECT", target.dir, mount.fs_type, support.as_str()), "pass --gds-dir DIR on the filesystem the workload reads (ext4/xfs on NVMe, or a GDS-capable distributed filesystem)"),
        FsSupport::CompatOnly => findings.add(bad, format!("{} is on {}: {}", target.dir, mount.fs_type, support.as_str()), "use ext4 (data=ordered) or xfs on NVMe, or Lustre/WekaFS/GPFS/BeeGFS/NFS over RDMA (proto=rdma)"),
        FsSupport::LocalBlock | FsSupport::Distributed => {}
    }
    if let Some(p) = target.udev_problem() {
        // A record that exists but cannot be read is not known to lack ID_FS_USAGE: an error, whatever the profile.
        let unreadable = matches!(
            target.udev,
            Some(crate::sysfs::udev::BlockLookup::Unreadable(_))
        );
        findings.add(if unreadable { bad.max(Status::Error) } else { bad }, format!("{}: cuFile will refuse every file on {} (cuFileHandleRegister 5027, \"file descriptor is not registered\")", p.what, mount.source), p.fix);
    }
    if let Some(c) = config {
        let denied_fs = c.strings("denylist.filesystems").unwrap_or_default();
        let denied_mounts = c.strings("denylist.mounts").unwrap_or_default();
        if denied_fs.iter().any(|f| f == &mount.fs_type)
            || denied_mounts.iter().any(|m| m == &mount.mount_point)
        {
            findings.add(Status::Warn, format!("cufile.json denylist excludes {} ({})", mount.mount_point, mount.fs_type), "remove the entry from denylist.filesystems / denylist.mounts if this filesystem should use GDS");
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
}
