//! `fabric-preflight snapshot DIR`: runs the checks live, then copies exactly the host files they read into DIR
//! (symlinks kept as symlinks, sysfs and procfs files as regular files with their content) and writes the vendor
//! answers they received to `DIR/vendor-answers.json`. `run --root DIR` then replays this machine.
//!
//! Read-only on the host: the only writes go under DIR.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::cli::SnapshotArgs;
use crate::exit::Exit;
use crate::host::MAX_TEXT_BYTES;
use crate::probe::Inputs;
use crate::recording::ANSWERS_FILE;
use crate::report::{self, Format, Style};

/// Largest file copied (PCI config space is 4 KiB; nothing a probe reads is near this).
const MAX_COPY_BYTES: u64 = MAX_TEXT_BYTES;
/// Symlink hops followed while copying one path (the kernel's own limit).
const MAX_LINK_HOPS: usize = 40;

pub fn main(args: SnapshotArgs) -> anyhow::Result<u8> {
    let dir = &args.dir;
    if dir.exists()
        && fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "snapshot {}: the directory exists and is not empty",
            dir.display()
        );
    }
    // DIR itself is created after the run; a missing parent is a typo, refused before anything runs.
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.exists() && !parent.is_dir() {
        bail!(
            "snapshot {}: {} is not a directory (only DIR itself is created)",
            dir.display(),
            parent.display()
        );
    }
    if !dir.exists() {
        // A parent this user may not write (or a read-only filesystem) is found now, not after every check ran.
        fs::create_dir(dir)
            .and_then(|()| fs::remove_dir(dir))
            .with_context(|| {
                format!(
                    "snapshot {}: cannot create it, nothing was run",
                    dir.display()
                )
            })?;
    }
    let mut plan = super::run::prepare(
        None,
        &args.profile,
        &args.only,
        &args.skip,
        args.timeout,
        Inputs {
            nccl_logs: vec![],
            gds_dir: None,
            env: std::env::vars().collect(),
        },
    )?;
    plan.host = plan.host.recording();
    let recorder = plan.host.clone();
    crate::tasks::install_panic_hook();
    crate::interrupt::install();
    let executed = super::run::execute(plan);
    if let Some(signal) = &executed.report.interrupted {
        // A tree recorded from checks cut short would replay as a machine missing those answers.
        eprintln!(
            "fabric-preflight: snapshot {}: interrupted by {signal}, nothing written",
            dir.display()
        );
        return Ok(Exit::COULD_NOT_RUN);
    }

    let created = !dir.exists();
    if created {
        fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let written = discard_unless_written(dir, created, || {
        let mut copier = Copier::new(dir);
        let paths = recorder.recorded();
        for (path, _) in &paths {
            copier.copy_path(path, 0);
        }
        if let Some((path, e)) = copier.lost.take() {
            bail!("writing the copy of {path}: {e}");
        }
        let answers = serde_json::to_string_pretty(&executed.recorded)?;
        fs::write(dir.join(ANSWERS_FILE), answers + "\n")
            .with_context(|| format!("writing {}", dir.join(ANSWERS_FILE).display()))?;
        if let Some(signal) = crate::interrupt::requested() {
            bail!("interrupted by {signal} while writing");
        }
        Ok((paths, copier))
    });
    let (paths, copier) = match written {
        Ok(done) => done,
        // The checks ran and the recording was lost (a full disk, a signal): the contract's "a report could not
        // be written", not a usage error.
        Err(e) => {
            eprintln!("fabric-preflight: {e:#}");
            return Ok(Exit::COULD_NOT_RUN);
        }
    };

    let mut text = report::render(Format::Table, &executed.report, Style::PLAIN);
    text += &format!(
        "snapshot {}: {} host paths read, {} entries copied, vendor answers for {} (replay with `run --root {}`)\n",
        dir.display(),
        paths.len(),
        copier.done.len(),
        if executed.recorded.is_empty() {
            "nothing".to_string()
        } else {
            executed
                .recorded
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        },
        dir.display()
    );
    for (path, why) in &copier.skipped {
        eprintln!("fabric-preflight: snapshot: not copied {path}: {why}");
    }
    Ok(super::emit(&text, Exit::OK))
}

/// Runs `write` into `dir`; where it fails (a full disk, a signal), what it wrote is removed, and `dir` too when
/// this run `created` it: a partial tree would replay as a machine missing the answers it lacks.
fn discard_unless_written<T>(
    dir: &Path,
    created: bool,
    write: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    write()
        .inspect_err(|_| {
            let _ = fs::remove_dir_all(dir);
            if !created {
                let _ = fs::create_dir(dir);
            }
        })
        .with_context(|| format!("snapshot {}: nothing kept", dir.display()))
}

/// Character and block devices (`/dev/infiniband/uverbs0`, `/dev/nvidia0`) replay as empty stand-ins.
fn is_device_node(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    meta.file_type().is_char_device() || meta.file_type().is_block_device()
}

struct Copier {
    dest: PathBuf,
    /// Host paths already created under `dest`.
    done: BTreeSet<String>,
    skipped: Vec<(String, String)>,
    /// The first write the destination refused for want of room or health (a full disk): the snapshot is lost.
    lost: Option<(String, std::io::Error)>,
}

impl Copier {
    fn new(dest: &Path) -> Copier {
        Copier {
            dest: dest.to_path_buf(),
            done: BTreeSet::new(),
            skipped: Vec::new(),
            lost: None,
        }
    }

    fn target(&self, host_path: &str) -> PathBuf {
        self.dest.join(host_path.trim_start_matches('/'))
    }

    /// Recreates `path` under the destination: every symlink on the way as a symlink (and its target too), the
    /// last component as a file with its content, or a directory with its entries when it is one.
    fn copy_path(&mut self, path: &str, hops: usize) {
        if hops > MAX_LINK_HOPS {
            self.skipped.push((path.into(), "too many symlinks".into()));
            return;
        }
        let parts: Vec<String> = Path::new(path)
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let mut here = String::new();
        for (i, part) in parts.iter().enumerate() {
            here = format!("{here}/{part}");
            let Ok(meta) = fs::symlink_metadata(&here) else {
                return; // absent on the host: absent in the snapshot too, which replays the same
            };
            if meta.file_type().is_symlink() {
                let Ok(link) = fs::read_link(&here) else {
                    return;
                };
                self.make_link(&here, &link);
                let base = Path::new(&here).parent().unwrap_or(Path::new("/"));
                let resolved = lexical_join(base, &link);
                let rest = parts[i + 1..].join("/");
                let next = if rest.is_empty() {
                    resolved
                } else {
                    format!("{}/{rest}", resolved.trim_end_matches('/'))
                };
                self.copy_path(&next, hops + 1);
                return;
            }
            if i + 1 < parts.len() {
                self.make_dir(&here);
            } else if meta.is_dir() {
                self.make_dir(&here);
                self.copy_listing(&here);
            } else if meta.is_file() {
                self.copy_file(&here);
            } else if is_device_node(&meta) {
                // A probe only asks whether `/dev/infiniband/uverbs0` exists; never open a device to copy it.
                self.placeholder(&here);
            }
        }
    }

    /// Records how writing the copy of `host_path` went: a full or failing destination loses the snapshot; any
    /// other refusal (a name that is a file in one listing and a directory in another) skips this path.
    fn wrote(&mut self, host_path: &str, written: std::io::Result<()>) {
        let Err(e) = written else {
            return;
        };
        let destination_failed = matches!(
            e.raw_os_error(),
            Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT | libc::EIO | libc::EROFS)
        );
        if !destination_failed {
            self.skipped.push((host_path.into(), e.to_string()));
        } else if self.lost.is_none() {
            self.lost = Some((host_path.into(), e));
        }
    }

    fn make_dir(&mut self, host_path: &str) {
        if self.done.insert(host_path.to_string()) {
            let made = fs::create_dir_all(self.target(host_path));
            self.wrote(host_path, made);
        }
    }

    fn make_link(&mut self, host_path: &str, link: &Path) {
        if !self.done.insert(host_path.to_string()) {
            return;
        }
        let target = self.target(host_path);
        if let Some(parent) = target.parent() {
            let _ = fs::create_dir_all(parent);
        }
        let made = symlink(link, &target);
        self.wrote(host_path, made);
    }

    /// A listed directory replays its entry names: links as links, subdirectories as (empty) directories, small
    /// files with their content.
    fn copy_listing(&mut self, dir: &str) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = format!(
                "{}/{}",
                dir.trim_end_matches('/'),
                entry.file_name().to_string_lossy()
            );
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                if let Ok(link) = fs::read_link(&path) {
                    self.make_link(&path, &link);
                }
            } else if meta.is_dir() {
                self.make_dir(&path);
            } else if meta.is_file() || is_device_node(&meta) {
                self.placeholder(&path);
            }
        }
    }

    /// A listed file no probe read: an empty stand-in keeps the listing identical without opening the file.
    /// Opening every attribute of a directory would read things no check needs and some that must not be read
    /// for nothing (a PCI function's `resource0` is device memory; `remove` is write-only). A recorded path
    /// is copied with its content by `copy_file`, which overwrites the stand-in.
    fn placeholder(&mut self, host_path: &str) {
        let target = self.target(host_path);
        if target.exists() {
            return;
        }
        if let Some(parent) = target.parent() {
            let _ = fs::create_dir_all(parent);
        }
        let written = fs::write(&target, b"");
        self.wrote(host_path, written);
    }

    /// Copies by reading, not `fs::copy`: sysfs reports 4096 bytes for every attribute whatever it holds.
    fn copy_file(&mut self, host_path: &str) {
        if !self.done.insert(host_path.to_string()) {
            return;
        }
        let content = fs::File::open(host_path).and_then(|f| {
            let mut buf = Vec::new();
            f.take(MAX_COPY_BYTES + 1).read_to_end(&mut buf)?;
            Ok(buf)
        });
        match content {
            Ok(buf) if buf.len() as u64 > MAX_COPY_BYTES => self.skipped.push((
                host_path.into(),
                format!("larger than {MAX_COPY_BYTES} bytes"),
            )),
            Ok(buf) => {
                let target = self.target(host_path);
                if let Some(parent) = target.parent() {
                    let _ = fs::create_dir_all(parent);
                }
                let written = fs::write(&target, buf);
                self.wrote(host_path, written);
            }
            // Unreadable here (permission, EINVAL on an empty sysfs slot): the snapshot holds no file, which
            // replays as missing rather than as a made-up value.
            Err(e) => self.skipped.push((host_path.into(), e.to_string())),
        }
    }
}

/// `base` joined with a link target, `..` and `.` folded without touching the filesystem.
fn lexical_join(base: &Path, link: &Path) -> String {
    let mut parts: Vec<String> = if link.is_absolute() {
        vec![]
    } else {
        base.components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    };
    for c in link.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that fails part-way (a full disk, a signal) keeps no partial tree: the directory is removed when
    /// the run made it, emptied when it was there (empty) before.
    #[test]
    fn a_failed_write_leaves_no_partial_tree() {
        let parent = tempfile::tempdir().unwrap();
        for created in [true, false] {
            let dir = parent.path().join("snap");
            fs::create_dir(&dir).unwrap();
            let r: anyhow::Result<()> = discard_unless_written(&dir, created, || {
                fs::create_dir_all(dir.join("sys/class")).unwrap();
                fs::write(dir.join("sys/class/x"), "1").unwrap();
                bail!("No space left on device")
            });
            assert!(format!("{:#}", r.unwrap_err()).contains("No space left"));
            assert_eq!(dir.exists(), !created);
            if !created {
                assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
                fs::remove_dir(&dir).unwrap();
            }
        }
    }

    #[test]
    fn link_targets_fold_dot_dot() {
        assert_eq!(
            lexical_join(
                Path::new("/sys/bus/pci/devices"),
                Path::new("../../../devices/pci0000:00/0000:00:06.0")
            ),
            "/sys/devices/pci0000:00/0000:00:06.0"
        );
        assert_eq!(
            lexical_join(Path::new("/etc"), Path::new("/etc/alternatives/x")),
            "/etc/alternatives/x"
        );
    }

    #[test]
    fn copier_keeps_links_and_copies_files_through_them() {
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        fs::create_dir_all(s.join("devices/gpu")).unwrap();
        fs::write(s.join("devices/gpu/speed"), "32.0 GT/s PCIe\n").unwrap();
        fs::create_dir_all(s.join("bus")).unwrap();
        symlink("../devices/gpu", s.join("bus/gpu")).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let mut c = Copier::new(dest.path());
        let host_path = format!("{}/bus/gpu/speed", s.display());
        c.copy_path(&host_path, 0);
        let copied_link = c.target(&format!("{}/bus/gpu", s.display()));
        assert_eq!(
            fs::read_link(&copied_link).unwrap(),
            Path::new("../devices/gpu")
        );
        assert_eq!(
            fs::read_to_string(c.target(&format!("{}/devices/gpu/speed", s.display()))).unwrap(),
            "32.0 GT/s PCIe\n"
        );
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
    }

    #[test]
    fn device_nodes_are_recorded_as_empty_stand_ins() {
        // Seen in the rxe VM: /dev/infiniband/uverbs0 was left out, so the replay failed rdma.devices.
        let dest = tempfile::tempdir().unwrap();
        let mut c = Copier::new(dest.path());
        c.copy_path("/dev/null", 0);
        let copied = c.target("/dev/null");
        assert!(copied.is_file(), "{}", copied.display());
        assert_eq!(fs::read(&copied).unwrap(), b"");
    }
}
