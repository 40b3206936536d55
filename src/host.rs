//! The host root: every read of `/proc`, `/sys`, `/dev`, `/etc` and `/run` goes through [`Host`].
//!
//! Probes name host-absolute paths (`/sys/class/infiniband`). On the live machine the root is `/`; with
//! `--root DIR` each path `P` maps to `DIR/P` and symlinks are resolved inside `DIR`, so a recorded tree
//! replays exactly like the machine it was taken from (sysfs links are relative, `/etc` links often absolute).

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Largest text file a probe reads; sysfs attributes are at most a page, procfs tables a few KiB.
/// Anything bigger is not what the probe expects and is reported rather than slurped.
pub const MAX_TEXT_BYTES: u64 = 1 << 20;

/// Symlink hops allowed while resolving one path (the kernel's own limit is 40).
const MAX_LINK_HOPS: usize = 40;

#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    live: bool,
    /// Host paths asked for and how (files read, directories listed, links read, paths looked up), for
    /// `snapshot` and the damage sweep. Shared by clones.
    recorder: Option<Arc<Mutex<BTreeMap<String, Access>>>>,
    /// Models built from many files (the PCIe tree) and asked for by several probes of one run: built once per
    /// host, shared by clones. See [`Host::shared`].
    shared: Arc<Mutex<SharedModels>>,
    /// Inside a recorded root: each path walked and where it links (`None`: not a link, or missing), so that a
    /// directory every read passes through (`/sys/devices/pci0000:15`) is looked at once per run, not once per
    /// read. A recorded tree does not change under a run. Shared by clones.
    links: Arc<Mutex<HashMap<String, Option<PathBuf>>>>,
}

/// How a path was asked for, strongest first: a path that was read is also looked up on the way.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Access {
    /// Contents read: a file read or a directory listed.
    Contents,
    /// A symlink's target read.
    Link,
    /// Only looked up (exists, is a directory, metadata, resolved).
    Lookup,
}

type SharedModels = HashMap<TypeId, Arc<OnceLock<Arc<dyn Any + Send + Sync>>>>;

/// Why a host file could not be read. Carries the host path, never the mapped one, so evidence reads the same
/// live and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub path: String,
    pub kind: ReadErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadErrorKind {
    NotFound,
    PermissionDenied,
    /// EINVAL: sysfs uses it for "no value here" (an empty GID slot).
    InvalidArgument,
    IsDirectory,
    NotDirectory,
    TooLarge(u64),
    NotUtf8,
    SymlinkLoop,
    /// A file the kernel always fills (a port state, a counter) came back with nothing in it.
    Empty,
    Other(String),
}

impl ReadError {
    fn new(path: &str, kind: ReadErrorKind) -> Self {
        ReadError {
            path: path.to_string(),
            kind,
        }
    }

    fn from_io(path: &str, err: &io::Error) -> Self {
        let kind = match err.kind() {
            io::ErrorKind::NotFound => ReadErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => ReadErrorKind::PermissionDenied,
            io::ErrorKind::IsADirectory => ReadErrorKind::IsDirectory,
            io::ErrorKind::NotADirectory => ReadErrorKind::NotDirectory,
            _ => match err.raw_os_error() {
                Some(libc::EINVAL) => ReadErrorKind::InvalidArgument,
                Some(libc::ELOOP) => ReadErrorKind::SymlinkLoop,
                Some(libc::EISDIR) => ReadErrorKind::IsDirectory,
                _ => ReadErrorKind::Other(err.to_string()),
            },
        };
        Self::new(path, kind)
    }

    pub fn is_not_found(&self) -> bool {
        self.kind == ReadErrorKind::NotFound
    }

    /// The reason alone, for evidence lines of the form `path = <reason>`.
    pub fn reason(&self) -> String {
        match &self.kind {
            ReadErrorKind::NotFound => "<missing>".into(),
            ReadErrorKind::PermissionDenied => "<permission denied>".into(),
            ReadErrorKind::InvalidArgument => "<EINVAL>".into(),
            ReadErrorKind::IsDirectory => "<is a directory>".into(),
            ReadErrorKind::NotDirectory => "<not a directory>".into(),
            ReadErrorKind::TooLarge(n) => format!("<larger than {n} bytes>"),
            ReadErrorKind::NotUtf8 => "<not UTF-8 text>".into(),
            ReadErrorKind::SymlinkLoop => "<symlink loop>".into(),
            ReadErrorKind::Empty => "<empty>".into(),
            ReadErrorKind::Other(msg) => format!("<{msg}>"),
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read {}: {}", self.path, self.reason())
    }
}

impl std::error::Error for ReadError {}

pub type ReadResult<T> = Result<T, ReadError>;

/// A read whose file may rightly be absent: missing is `None` (a fact about the node), any other failure stays
/// an error (a value that was not read is never taken for "absent").
pub fn optional<T>(read: ReadResult<T>) -> ReadResult<Option<T>> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

impl Host {
    /// The machine this process runs on.
    pub fn live() -> Self {
        Host {
            root: PathBuf::from("/"),
            live: true,
            recorder: None,
            shared: Arc::default(),
            links: Arc::default(),
        }
    }

    /// A recorded tree. The directory must exist.
    pub fn at(root: &Path) -> anyhow::Result<Self> {
        let meta =
            fs::metadata(root).map_err(|e| anyhow::anyhow!("--root {}: {e}", root.display()))?;
        anyhow::ensure!(meta.is_dir(), "--root {}: not a directory", root.display());
        let root = fs::canonicalize(root)
            .map_err(|e| anyhow::anyhow!("--root {}: {e}", root.display()))?;
        let live = root == Path::new("/");
        Ok(Host {
            root,
            live,
            recorder: None,
            shared: Arc::default(),
            links: Arc::default(),
        })
    }

    /// This host, remembering every path asked for from now on (clones share the record). Models and files
    /// shared before (`profile auto` reads the PCIe tree and the RDMA ports to choose) are read again: a cached
    /// answer notes no path, and a snapshot missing those files would replay as a machine without the hardware.
    pub fn recording(mut self) -> Self {
        self.recorder = Some(Arc::default());
        self.shared = Arc::default();
        self
    }

    pub fn is_recording(&self) -> bool {
        self.recorder.is_some()
    }

    /// Adds paths asked for elsewhere (a probe child process) to the record.
    pub fn record_all(&self, paths: impl IntoIterator<Item = (String, Access)>) {
        for (path, access) in paths {
            self.note(&path, access);
        }
    }

    /// Every host path asked for since [`Host::recording`], sorted, with the strongest way it was asked for.
    pub fn recorded(&self) -> Vec<(String, Access)> {
        self.recorder
            .as_ref()
            .and_then(|rec| {
                rec.lock()
                    .ok()
                    .map(|map| map.iter().map(|(p, a)| (p.clone(), *a)).collect())
            })
            .unwrap_or_default()
    }

    /// The value `build` makes from this host, built at most once per host (and its clones) and then shared:
    /// probes that run concurrently and need the same model of many files read those files once. Keyed by
    /// type, so each model type has one builder.
    pub fn shared<T: Any + Send + Sync>(&self, build: impl FnOnce(&Host) -> T) -> Arc<T> {
        let cell = {
            let mut models = self
                .shared
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            models.entry(TypeId::of::<T>()).or_default().clone()
        };
        // Built outside the map's lock, so a builder may ask for another model; a second probe asking for the
        // same one waits here for the first build instead of repeating it.
        let any = cell
            .get_or_init(|| Arc::new(build(self)) as Arc<dyn Any + Send + Sync>)
            .clone();
        any.downcast::<T>()
            .unwrap_or_else(|_| unreachable!("the map is keyed by the value's own TypeId"))
    }

    fn note(&self, path: &str, access: Access) {
        if let Some(rec) = &self.recorder {
            if let Ok(mut map) = rec.lock() {
                let kept = map.entry(path.to_string()).or_insert(access);
                *kept = (*kept).min(access);
            }
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Where the host path `path` lies on this machine's filesystem, with every symlink resolved inside the
    /// root. The error names the host path.
    pub fn resolve(&self, path: &str) -> ReadResult<PathBuf> {
        self.note(path, Access::Lookup);
        if self.live {
            return Ok(PathBuf::from(path));
        }
        self.resolve_in_root(path)
            .map(|host_path| self.map(&host_path))
    }

    /// The host-absolute path `path` points to once symlinks are followed (`/sys/bus/pci/devices/0000:17:00.0`
    /// → `/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0`).
    pub fn canonical(&self, path: &str) -> ReadResult<String> {
        self.note(path, Access::Lookup);
        if self.live {
            return fs::canonicalize(path)
                .map(|p| p.to_string_lossy().into_owned())
                .map_err(|e| ReadError::from_io(path, &e));
        }
        let resolved = self.resolve_in_root(path)?;
        // A dangling last component is reported, as canonicalize does live.
        fs::symlink_metadata(self.map(&resolved)).map_err(|e| ReadError::from_io(path, &e))?;
        Ok(resolved)
    }

    /// Text content with trailing whitespace (the kernel's newline) removed.
    pub fn read(&self, path: &str) -> ReadResult<String> {
        let bytes = self.read_bytes(path, MAX_TEXT_BYTES)?;
        let text =
            String::from_utf8(bytes).map_err(|_| ReadError::new(path, ReadErrorKind::NotUtf8))?;
        Ok(text.trim_end().to_string())
    }

    /// Like [`Host::read`] for attributes that always hold a value: an empty file is an error, not "".
    pub fn read_value(&self, path: &str) -> ReadResult<String> {
        let text = self.read(path)?;
        if text.trim().is_empty() {
            return Err(ReadError::new(path, ReadErrorKind::Empty));
        }
        Ok(text)
    }

    /// At most `max` bytes; a longer file is an error, not a truncated answer (config space is read with the
    /// exact size it may have).
    pub fn read_bytes(&self, path: &str, max: u64) -> ReadResult<Vec<u8>> {
        self.note(path, Access::Contents);
        let real = self.resolve(path)?;
        // Non-blocking open: a FIFO planted in a recorded tree reads as empty instead of waiting for a writer
        // forever. sysfs and procfs files ignore the flag.
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&real)
            .map_err(|e| ReadError::from_io(path, &e))?;
        let mut buf = Vec::new();
        // Read one byte past the limit to tell "exactly max" from "more than max"; sysfs reports size 4096
        // whatever the content, so metadata cannot be trusted.
        file.take(max + 1)
            .read_to_end(&mut buf)
            .map_err(|e| ReadError::from_io(path, &e))?;
        if buf.len() as u64 > max {
            return Err(ReadError::new(path, ReadErrorKind::TooLarge(max)));
        }
        Ok(buf)
    }

    /// Entry names of a directory, sorted so output is stable.
    pub fn read_dir(&self, path: &str) -> ReadResult<Vec<String>> {
        self.note(path, Access::Contents);
        let real = self.resolve(path)?;
        let entries = fs::read_dir(&real).map_err(|e| ReadError::from_io(path, &e))?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    /// The raw target of a symlink (`../../../devices/pci0000:00/0000:00:06.0`).
    pub fn read_link(&self, path: &str) -> ReadResult<String> {
        self.note(path, Access::Link);
        let parent = parent_of(path);
        let name = path.rsplit('/').next().unwrap_or(path);
        let dir = if self.live {
            PathBuf::from(&parent)
        } else {
            self.map(&self.resolve_in_root(&parent)?)
        };
        fs::read_link(dir.join(name))
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| ReadError::from_io(path, &e))
    }

    /// Whether this process may open `path` for reading and writing (`access(2)` with its real uid, groups and
    /// capabilities). None for a recorded tree: its files say nothing about who may open the live device.
    pub fn access_rw(&self, path: &str) -> Option<ReadResult<()>> {
        if !self.live {
            return None;
        }
        let c_path = match std::ffi::CString::new(path) {
            Ok(p) => p,
            Err(_) => return Some(Err(ReadError::new(path, ReadErrorKind::InvalidArgument))),
        };
        // SAFETY: a valid NUL-terminated path; access() only reads it.
        if unsafe { libc::access(c_path.as_ptr(), libc::R_OK | libc::W_OK) } == 0 {
            Some(Ok(()))
        } else {
            Some(Err(ReadError::from_io(path, &io::Error::last_os_error())))
        }
    }

    pub fn exists(&self, path: &str) -> bool {
        self.note(path, Access::Lookup);
        self.resolve(path).map(|p| p.exists()).unwrap_or(false)
    }

    pub fn is_dir(&self, path: &str) -> bool {
        self.note(path, Access::Lookup);
        self.resolve(path).map(|p| p.is_dir()).unwrap_or(false)
    }

    /// `stat` of a host path, following symlinks inside the root.
    pub fn metadata(&self, path: &str) -> ReadResult<fs::Metadata> {
        self.note(path, Access::Lookup);
        let real = self.resolve(path)?;
        fs::metadata(&real).map_err(|e| ReadError::from_io(path, &e))
    }

    fn map(&self, host_path: &str) -> PathBuf {
        self.root.join(host_path.trim_start_matches('/'))
    }

    /// Walks `path` one component at a time, following symlinks with the root as `/`.
    fn resolve_in_root(&self, path: &str) -> ReadResult<String> {
        let mut pending: Vec<String> = components(path);
        pending.reverse();
        let mut resolved: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(part) = pending.pop() {
            match part.as_str() {
                "." => continue,
                ".." => {
                    resolved.pop();
                    continue;
                }
                _ => {}
            }
            resolved.push(part);
            let here = format!("/{}", resolved.join("/"));
            let Some(target) = self
                .link_at(&here)
                .map_err(|e| ReadError::from_io(path, &e))?
            else {
                // Not a link, or missing (then the rest cannot be links: the final open reports ENOENT).
                continue;
            };
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Err(ReadError::new(path, ReadErrorKind::SymlinkLoop));
            }
            resolved.pop();
            if target.is_absolute() {
                resolved.clear();
            }
            let mut target_parts = components(&target.to_string_lossy());
            target_parts.reverse();
            pending.extend(target_parts);
        }
        Ok(format!("/{}", resolved.join("/")))
    }

    /// Where the tree path `here` links, once per run ([`Host::links`]).
    fn link_at(&self, here: &str) -> io::Result<Option<PathBuf>> {
        let known = self.links.lock().ok().and_then(|l| l.get(here).cloned());
        if let Some(target) = known {
            return Ok(target);
        }
        let real = self.map(here);
        let target = match fs::symlink_metadata(&real) {
            Ok(meta) if meta.file_type().is_symlink() => Some(fs::read_link(&real)?),
            _ => None,
        };
        if let Ok(mut links) = self.links.lock() {
            links.insert(here.to_string(), target.clone());
        }
        Ok(target)
    }
}

fn components(path: &str) -> Vec<String> {
    Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// `/a/b/c` → `/a/b`.
pub fn parent_of(path: &str) -> String {
    match path.trim_end_matches('/').rsplit_once('/') {
        Some(("", _)) | None => "/".into(),
        Some((parent, _)) => parent.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        fs::create_dir_all(r.join("sys/devices/pci0000:00/0000:00:06.0")).unwrap();
        fs::write(
            r.join("sys/devices/pci0000:00/0000:00:06.0/vendor"),
            "0x10de\n",
        )
        .unwrap();
        fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:06.0",
            r.join("sys/bus/pci/devices/0000:00:06.0"),
        )
        .unwrap();
        fs::create_dir_all(r.join("etc/alternatives")).unwrap();
        fs::write(r.join("etc/alternatives/real.json"), "{}").unwrap();
        symlink("/etc/alternatives/real.json", r.join("etc/cufile.json")).unwrap();
        symlink("loop-b", r.join("etc/loop-a")).unwrap();
        symlink("loop-a", r.join("etc/loop-b")).unwrap();
        let host = Host::at(r).unwrap();
        (dir, host)
    }

    #[test]
    fn relative_sysfs_links_resolve_inside_root() {
        let (_d, host) = tree();
        assert_eq!(
            host.read("/sys/bus/pci/devices/0000:00:06.0/vendor")
                .unwrap(),
            "0x10de"
        );
        assert_eq!(
            host.canonical("/sys/bus/pci/devices/0000:00:06.0").unwrap(),
            "/sys/devices/pci0000:00/0000:00:06.0"
        );
    }

    #[test]
    fn absolute_links_stay_inside_root() {
        let (_d, host) = tree();
        assert_eq!(host.read("/etc/cufile.json").unwrap(), "{}");
    }

    #[test]
    fn symlink_loop_is_an_error_not_a_hang() {
        let (_d, host) = tree();
        assert_eq!(
            host.read("/etc/loop-a").unwrap_err().kind,
            ReadErrorKind::SymlinkLoop
        );
    }

    #[test]
    fn missing_file_names_host_path() {
        let (_d, host) = tree();
        let err = host.read("/proc/modules").unwrap_err();
        assert_eq!(err.path, "/proc/modules");
        assert!(err.is_not_found());
    }

    #[test]
    fn oversized_file_is_refused() {
        let (d, host) = tree();
        fs::write(d.path().join("etc/big"), vec![b'x'; 100]).unwrap();
        assert_eq!(
            host.read_bytes("/etc/big", 10).unwrap_err().kind,
            ReadErrorKind::TooLarge(10)
        );
        assert_eq!(host.read_bytes("/etc/big", 100).unwrap().len(), 100);
    }

    #[test]
    fn directory_read_as_file_is_an_error() {
        let (_d, host) = tree();
        assert!(host.read("/sys/bus").is_err());
    }

    #[test]
    fn shared_model_is_built_once_across_clones() {
        let (_d, host) = tree();
        let builds = std::sync::atomic::AtomicUsize::new(0);
        let build = |h: &Host| {
            builds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            h.read("/sys/bus/pci/devices/0000:00:06.0/vendor").ok()
        };
        let a = host.shared(build);
        let b = host.clone().shared(build);
        assert_eq!(a.as_deref(), Some("0x10de"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(builds.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// Reproduced: `snapshot --profile auto` read the PCIe tree and the RDMA ports to choose the profile, then
    /// started recording; the checks got those answers from the shared cache and the files were never recorded.
    #[test]
    fn a_recording_host_records_files_read_and_shared_before_it_started() {
        let (_d, host) = tree();
        let vendor = "/sys/bus/pci/devices/0000:00:06.0/vendor";
        let build = |h: &Host| h.read(vendor).ok();
        assert_eq!(host.shared(build).as_deref(), Some("0x10de"));
        let recording = host.recording();
        assert_eq!(recording.shared(build).as_deref(), Some("0x10de"));
        assert_eq!(
            recording.recorded(),
            [(vendor.to_string(), Access::Contents)]
        );
    }

    #[test]
    fn parent_of_handles_root() {
        assert_eq!(parent_of("/proc"), "/");
        assert_eq!(parent_of("/a/b/c"), "/a/b");
    }

    #[test]
    fn fifo_in_a_recorded_tree_reads_as_empty_instead_of_blocking() {
        let (dir, host) = tree();
        let fifo = dir.path().join("proc/modules");
        fs::create_dir_all(fifo.parent().unwrap()).unwrap();
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
        assert_eq!(host.read("/proc/modules").unwrap(), "");
        assert_eq!(
            host.read_value("/proc/modules").unwrap_err().reason(),
            "<empty>"
        );
    }

    #[test]
    fn device_access_is_known_live_only() {
        let (dir, host) = tree();
        assert!(host.access_rw("/sys").is_none());
        let file = dir.path().join("node");
        fs::write(&file, "").unwrap();
        let live = Host::live();
        assert_eq!(live.access_rw(file.to_str().unwrap()), Some(Ok(())));
        fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            let denied = live.access_rw(file.to_str().unwrap()).unwrap().unwrap_err();
            assert_eq!(denied.kind, ReadErrorKind::PermissionDenied);
        }
    }
}
