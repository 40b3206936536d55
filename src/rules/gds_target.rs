//! Shared by `gds.config` and `gds.read` (not a probe): the directory under test, the filesystem and block
//! device that hold it, whether GDS can serve that filesystem, and the udev record cuFile insists on.

use std::path::Path;

use crate::host::{Host, ReadError};
use crate::sysfs::mountinfo::{self, Mount, SELF_MOUNTINFO};
use crate::sysfs::udev::{self, BlockLookup};

/// The directory `gds.read` writes its test file into: `--gds-dir` when given, else `TMPDIR` when absolute (the
/// runner's scratch directory lives under the system temp dir), else `/tmp`.
pub fn target_dir(gds_dir: Option<&Path>, tmpdir: Option<&str>) -> String {
    if let Some(dir) = gds_dir {
        return dir.to_string_lossy().into_owned();
    }
    tmpdir
        .filter(|d| d.starts_with('/'))
        .unwrap_or("/tmp")
        .to_string()
}

/// What GDS makes of a filesystem type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsSupport {
    /// Local block filesystem GDS serves through nvidia-fs or P2PDMA (ext4 in ordered mode, xfs).
    LocalBlock,
    /// Distributed filesystem with a GDS client (Lustre, WekaFS, GPFS, BeeGFS, NFS over RDMA).
    Distributed,
    /// cuFile reads it only in compatibility mode (POSIX through host memory).
    CompatOnly,
    /// O_DIRECT is refused or there is no block device: cuFile cannot register files here at all.
    NoDirectIo,
}

impl FsSupport {
    pub fn as_str(self) -> &'static str {
        match self {
            FsSupport::LocalBlock => "GDS-capable local filesystem",
            FsSupport::Distributed => "GDS-capable distributed filesystem",
            FsSupport::CompatOnly => "compat mode only (no GPUDirect path for this filesystem)",
            FsSupport::NoDirectIo => "no O_DIRECT / no block device: cuFile cannot use it",
        }
    }
}

/// Classifies a mount. NFS counts as GDS-capable only over RDMA (`proto=rdma`); ext4 with `data=journal`
/// is not supported by nvidia-fs.
pub fn classify(mount: &Mount) -> FsSupport {
    match mount.fs_type.as_str() {
        "ext4" if mount.has_super_option("data=journal") => FsSupport::CompatOnly,
        "ext4" | "xfs" => FsSupport::LocalBlock,
        "lustre" | "wekafs" | "gpfs" | "beegfs" => FsSupport::Distributed,
        "nfs" | "nfs4" if mount.has_super_option("proto=rdma") => FsSupport::Distributed,
        "tmpfs" | "ramfs" | "overlay" | "proc" | "sysfs" | "devtmpfs" | "squashfs" | "aufs" => {
            FsSupport::NoDirectIo
        }
        _ => FsSupport::CompatOnly,
    }
}

/// The directory, its mount and its udev record.
#[derive(Debug, Clone)]
pub struct Target {
    pub dir: String,
    pub mount: Result<Mount, TargetError>,
    /// For block-device filesystems (major ≠ 0) only; network filesystems have no udev record.
    pub udev: Option<BlockLookup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    Unreadable(ReadError),
    NoMount,
}

/// Looks `dir` up in the host's mount table. Live, the directory is canonicalised first (it is the user's
/// path); under `--root` the recorded table is taken as is.
pub fn inspect(host: &Host, dir: &str) -> Target {
    let path = if host.is_live() {
        std::fs::canonicalize(dir)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| dir.to_string())
    } else {
        dir.to_string()
    };
    let mount = match mountinfo::read_mounts(host) {
        Ok(mounts) => mountinfo::mount_for(&mounts, &path)
            .cloned()
            .ok_or(TargetError::NoMount),
        Err(e) => Err(TargetError::Unreadable(e)),
    };
    let udev = match &mount {
        Ok(m) if m.major != 0 && classify(m) != FsSupport::NoDirectIo => {
            Some(udev::read_block(host, m.major, m.minor))
        }
        _ => None,
    };
    Target {
        dir: path,
        mount,
        udev,
    }
}

/// Why cuFile will refuse files on this device (handle registration fails with 5027 "file descriptor is not
/// registered"; cuFile's log says `udev property not found: ID_FS_USAGE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdevProblem {
    /// The record file cuFile reads.
    pub record: String,
    pub what: String,
    pub fix: String,
}

impl Target {
    pub fn udev_problem(&self) -> Option<UdevProblem> {
        let m = self.mount.as_ref().ok()?;
        let record = udev::block_record_path(m.major, m.minor);
        let create = format!(
            "create the entry as the SRE fix: `mkdir -p {} && printf 'E:ID_FS_USAGE=filesystem\\nE:ID_FS_TYPE={}\\n' > {record}` (lost on reboot)",
            udev::UDEV_DATA,
            m.fs_type
        );
        let what = match self.udev.as_ref()? {
            BlockLookup::Found(r) if r.property("ID_FS_USAGE").is_some() => return None,
            BlockLookup::Found(_) => format!("{record} exists but has no E:ID_FS_USAGE"),
            BlockLookup::Missing {
                database_present: false,
                run_udev_present,
            } => format!(
                "{record} missing: no udev database ({} {})",
                if *run_udev_present {
                    udev::UDEV_DATA
                } else {
                    udev::RUN_UDEV
                },
                "does not exist: no udev daemon, or a container without the host's /run/udev"
            ),
            BlockLookup::Missing { .. } => {
                format!("{record} missing (udev has not processed {})", m.source)
            }
            BlockLookup::Unreadable(e) => format!("{record} unreadable: {}", e.reason()),
        };
        let fix = match self.udev.as_ref()? {
            BlockLookup::Missing {
                database_present: false,
                ..
            } => format!(
                "in a container, mount the host's udev database: `-v /run/udev:/run/udev:ro` (Kubernetes: a read-only hostPath volume /run/udev); on a host without a udev daemon, {create}"
            ),
            _ => format!(
                "`udevadm trigger --subsystem-match=block --action=change` where udev runs; otherwise {create}"
            ),
        };
        Some(UdevProblem { record, what, fix })
    }

    /// `path = value` lines for reports.
    pub fn evidence(&self) -> Vec<String> {
        let mut ev = vec![format!("target directory = {}", self.dir)];
        match &self.mount {
            Ok(m) => ev.push(format!(
                "{SELF_MOUNTINFO} [{}] = {} on {} ({}, dev {}, options {})",
                self.dir,
                m.fs_type,
                m.mount_point,
                m.source,
                m.dev(),
                m.super_options
            )),
            Err(TargetError::Unreadable(e)) => ev.push(format!("{} = {}", e.path, e.reason())),
            Err(TargetError::NoMount) => {
                ev.push(format!("{SELF_MOUNTINFO} = <no mount covers {}>", self.dir))
            }
        }
        if let (Ok(m), Some(lookup)) = (&self.mount, &self.udev) {
            let record = udev::block_record_path(m.major, m.minor);
            ev.push(match lookup {
                BlockLookup::Found(r) => format!(
                    "{record} [ID_FS_USAGE] = {}",
                    r.property("ID_FS_USAGE").unwrap_or("<missing>")
                ),
                BlockLookup::Missing {
                    database_present,
                    run_udev_present,
                } => format!(
                    "{record} = <missing> ({} {}, {} {})",
                    udev::RUN_UDEV,
                    if *run_udev_present {
                        "present"
                    } else {
                        "missing"
                    },
                    udev::UDEV_DATA,
                    if *database_present {
                        "present"
                    } else {
                        "missing"
                    }
                ),
                BlockLookup::Unreadable(e) => format!("{record} = {}", e.reason()),
            });
        }
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::mountinfo::parse_mountinfo;

    fn mount(line: &str) -> Mount {
        parse_mountinfo(line).remove(0)
    }

    #[test]
    fn fs_types_classify() {
        let ext4 = mount("1 0 254:0 / / rw - ext4 /dev/vda rw");
        assert_eq!(classify(&ext4), FsSupport::LocalBlock);
        let journal = mount("1 0 254:0 / / rw - ext4 /dev/vda rw,data=journal");
        assert_eq!(classify(&journal), FsSupport::CompatOnly);
        let nfs_tcp = mount("1 0 0:44 / /n rw - nfs4 s:/e rw,proto=tcp");
        assert_eq!(classify(&nfs_tcp), FsSupport::CompatOnly);
        let nfs_rdma = mount("1 0 0:44 / /n rw - nfs4 s:/e rw,proto=rdma");
        assert_eq!(classify(&nfs_rdma), FsSupport::Distributed);
        let tmp = mount("1 0 0:23 / /tmp rw - tmpfs tmpfs rw");
        assert_eq!(classify(&tmp), FsSupport::NoDirectIo);
        let btrfs = mount("1 0 0:31 / /b rw - btrfs /dev/sda rw");
        assert_eq!(classify(&btrfs), FsSupport::CompatOnly);
    }

    #[test]
    fn target_dir_prefers_flag_then_tmpdir() {
        assert_eq!(target_dir(None, None), "/tmp");
        assert_eq!(target_dir(None, Some("relative")), "/tmp");
        assert_eq!(target_dir(None, Some("/scratch")), "/scratch");
        assert_eq!(
            target_dir(Some(Path::new("/mnt/nvme")), Some("/scratch")),
            "/mnt/nvme"
        );
    }

    fn tree(with_udev: Option<&str>) -> (tempfile::TempDir, Host) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("proc/self")).unwrap();
        std::fs::write(
            d.path().join("proc/self/mountinfo"),
            "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n",
        )
        .unwrap();
        if let Some(text) = with_udev {
            std::fs::create_dir_all(d.path().join("run/udev/data")).unwrap();
            std::fs::write(d.path().join("run/udev/data/b254:0"), text).unwrap();
        }
        let host = Host::at(d.path()).unwrap();
        (d, host)
    }

    #[test]
    fn missing_udev_database_says_mount_run_udev_and_names_the_file() {
        let (_d, host) = tree(None);
        let t = inspect(&host, "/root");
        let p = t.udev_problem().unwrap();
        assert_eq!(p.record, "/run/udev/data/b254:0");
        assert!(p.what.contains("no udev database"), "{}", p.what);
        assert!(p.fix.contains("-v /run/udev:/run/udev:ro"), "{}", p.fix);
        assert!(p.fix.contains("> /run/udev/data/b254:0"), "{}", p.fix);
        assert!(t
            .evidence()
            .iter()
            .any(|e| e.contains("b254:0 = <missing>")));
    }

    #[test]
    fn record_without_fs_usage_is_a_problem() {
        let (_d, host) = tree(Some("E:ID_FS_TYPE=ext4\n"));
        let p = inspect(&host, "/root").udev_problem().unwrap();
        assert!(p.what.contains("no E:ID_FS_USAGE"), "{}", p.what);
        assert!(p.fix.contains("udevadm trigger"), "{}", p.fix);
    }

    #[test]
    fn record_with_fs_usage_is_fine() {
        let (_d, host) = tree(Some("E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n"));
        let t = inspect(&host, "/root");
        assert_eq!(t.udev_problem(), None);
        assert_eq!(t.mount.as_ref().map(classify), Ok(FsSupport::LocalBlock));
    }
}
