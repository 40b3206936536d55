//! The host root: every read of `/proc`, `/sys`, `/dev`, `/etc` and `/run` goes through [`Host`].
//!
//! Probes name host-absolute paths (`/sys/class/infiniband`). On the live machine the root is `/`; with
//! `--root DIR` each path `P` maps to `DIR/P` and symlinks are resolved inside `DIR`, so a recorded tree
//! replays exactly like the machine it was taken from (sysfs links are relative, `/etc` links often absolute).
//! A recorded root is opened once and every file is opened relative to it (`openat`, `fstatat`, `readlinkat`),
//! so the kernel walks the host path alone, not the root's own path in front of it, on every read.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsString};
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::input;

/// Largest text file a probe reads; sysfs attributes are at most a page, procfs tables a few KiB.
/// Anything bigger is not what the probe expects and is reported rather than slurped.
pub const MAX_TEXT_BYTES: u64 = 1 << 20;

/// Symlink hops allowed while resolving one path (the kernel's own limit is 40).
const MAX_LINK_HOPS: usize = 40;
/// Entries of one sysfs directory: more PCI functions, RDMA devices or network interfaces than any node has
/// (PCIe addresses 65536 functions per domain) is a damaged or hostile tree, refused before it costs memory.
pub const MAX_DIR_ENTRIES: usize = 1 << 16;

#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    live: bool,
    /// A recorded root, opened once (`O_PATH`): the directory every host path is opened relative to.
    root_dir: Option<Arc<OwnedFd>>,
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
    /// Inside a recorded root: each directory files were asked for in (`/sys/bus/pci/devices/0000:17:00.0`) and
    /// the walk that resolved it, so that the twenty attributes read there walk it once. Shared by clones.
    dirs: Arc<Mutex<HashMap<String, Arc<Walk>>>>,
    /// Inside a recorded root: the content of each file read, so that checks reading the same attribute (the
    /// PCIe tree and the EFA scan both read every function's `vendor`) open it once per run. Shared by clones.
    files: Arc<Mutex<HashMap<String, Arc<[u8]>>>>,
}

/// A path resolved inside a recorded root, component by component: where it leads and how many symlink hops
/// that took (they count towards [`MAX_LINK_HOPS`] for whatever is walked after it).
#[derive(Debug, Clone, Default)]
struct Walk {
    parts: Vec<String>,
    hops: usize,
}

impl Walk {
    /// The host-absolute path walked to: `/sys/devices/pci0000:16`, `/` for the root.
    fn path(&self) -> String {
        format!("/{}", self.parts.join("/"))
    }

    /// `name` inside the directory walked to, before `name` itself is looked at.
    fn child(&self, name: &str) -> String {
        let mut path = String::new();
        for part in &self.parts {
            path.push('/');
            path.push_str(part);
        }
        path.push('/');
        path.push_str(name);
        path
    }
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
    /// A directory with more entries than a node can have (see [`MAX_DIR_ENTRIES`]).
    TooManyEntries(usize),
    /// A device node, FIFO or socket in a recorded tree (which holds regular files, directories and links).
    NotAFile(&'static str),
    /// A file the kernel always fills (a port state, a counter) came back with nothing in it.
    Empty,
    Other(String),
}

impl ReadError {
    /// A file read whole whose contents are not the format its reader knows.
    pub fn malformed(path: &str, why: impl Into<String>) -> Self {
        Self::new(path, ReadErrorKind::Other(why.into()))
    }

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
            ReadErrorKind::TooManyEntries(n) => format!("<more than {n} entries>"),
            ReadErrorKind::NotAFile(kind) => format!("<{kind}, not a regular file>"),
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
            root_dir: None,
            recorder: None,
            shared: Arc::default(),
            links: Arc::default(),
            dirs: Arc::default(),
            files: Arc::default(),
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
        let root_dir = if live {
            None
        } else {
            let dir =
                open_root(&root).map_err(|e| anyhow::anyhow!("--root {}: {e}", root.display()))?;
            Some(Arc::new(dir))
        };
        Ok(Host {
            root,
            live,
            root_dir,
            recorder: None,
            shared: Arc::default(),
            links: Arc::default(),
            dirs: Arc::default(),
            files: Arc::default(),
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
        self.stat_at(&resolved, libc::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| ReadError::from_io(path, &e))?;
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
        self.read_unnoted(path, max)
    }

    /// A file that belongs to the recording rather than to the node (`vendor-answers.json`): read like any
    /// other, but not listed among the node's files read (a snapshot writes its own).
    pub fn read_recording_file(&self, path: &str, max: u64) -> ReadResult<Vec<u8>> {
        self.read_unnoted(path, max)
    }

    fn read_unnoted(&self, path: &str, max: u64) -> ReadResult<Vec<u8>> {
        let bytes = if self.live {
            // Non-blocking open: a FIFO reads as empty instead of waiting for a writer forever. sysfs and
            // procfs files ignore the flag.
            let file = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| ReadError::from_io(path, &e))?;
            read_at_most(file, max).map_err(|e| ReadError::from_io(path, &e))?
        } else {
            self.read_in_root(path, max)?
        };
        if bytes.len() as u64 > max {
            return Err(ReadError::new(path, ReadErrorKind::TooLarge(max)));
        }
        Ok(bytes)
    }

    /// A file of the recorded tree, read once per run ([`Host::files`]): its directory walked in the root, the
    /// file opened without following a link (only a link, ELOOP, is walked in the root too), non-blocking (a
    /// FIFO planted in the tree reads as empty instead of waiting for a writer forever).
    fn read_in_root(&self, path: &str, max: u64) -> ReadResult<Vec<u8>> {
        let real = self.resolve_dir_of(path)?;
        let known = self.files.lock().ok().and_then(|f| f.get(&real).cloned());
        if let Some(bytes) = known {
            return Ok(bytes.to_vec());
        }
        let file = self.open_regular_at(path, real.clone())?;
        let bytes = read_recorded(file, max).map_err(|e| ReadError::from_io(path, &e))?;
        // Kept only when read whole: a later read with a larger limit must not see it cut.
        if bytes.len() as u64 <= max {
            if let Ok(mut files) = self.files.lock() {
                files.insert(real, bytes.as_slice().into());
            }
        }
        Ok(bytes)
    }

    /// Opens a file of the recorded tree for reading. A recorded tree holds regular files, directories and links
    /// only: anything else (a device node planted as `/proc/sys/kernel/hostname`, a FIFO) is refused by the type
    /// of an `O_PATH` handle, before it is opened for real, so no driver's `open` runs and nothing waits for a
    /// writer. A link as the last component is walked in the root.
    fn open_regular_at(&self, path: &str, mut real: String) -> ReadResult<fs::File> {
        let failed = |e: io::Error| ReadError::from_io(path, &e);
        let locate = |real: &str| {
            let handle = self
                .open_at(real, libc::O_PATH | libc::O_NOFOLLOW)
                .map_err(failed)?;
            let meta = handle.metadata().map_err(failed)?;
            Ok::<_, ReadError>(meta)
        };
        let mut seen = locate(&real)?;
        if seen.file_type().is_symlink() {
            real = self.resolve_in_root(path)?;
            seen = locate(&real)?;
        }
        match input::kind_of(seen.file_type()) {
            None => {}
            Some(_) if seen.is_dir() => {
                return Err(ReadError::new(path, ReadErrorKind::IsDirectory))
            }
            Some(kind) => return Err(ReadError::new(path, ReadErrorKind::NotAFile(kind))),
        }
        let file = self.open_at(&real, libc::O_NOFOLLOW).map_err(failed)?;
        let opened = file.metadata().map_err(failed)?;
        if (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
            return Err(ReadError::new(
                path,
                ReadErrorKind::Other("replaced while being opened".into()),
            ));
        }
        Ok(file)
    }

    /// Entry names of a directory, sorted so output is stable.
    pub fn read_dir(&self, path: &str) -> ReadResult<Vec<String>> {
        self.note(path, Access::Contents);
        let real = self.resolve(path)?;
        let entries = fs::read_dir(&real).map_err(|e| ReadError::from_io(path, &e))?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .take(MAX_DIR_ENTRIES + 1)
            .collect();
        if names.len() > MAX_DIR_ENTRIES {
            return Err(ReadError::new(
                path,
                ReadErrorKind::TooManyEntries(MAX_DIR_ENTRIES),
            ));
        }
        names.sort();
        Ok(names)
    }

    /// The raw target of a symlink (`../../../devices/pci0000:00/0000:00:06.0`).
    pub fn read_link(&self, path: &str) -> ReadResult<String> {
        self.note(path, Access::Link);
        let name = path.rsplit('/').next().unwrap_or(path);
        if self.live {
            return fs::read_link(Path::new(&parent_of(path)).join(name))
                .map(|p| p.to_string_lossy().into_owned())
                .map_err(|e| ReadError::from_io(path, &e));
        }
        let dir = self.walk_dir(path, &parent_of(path))?;
        self.read_link_at(&dir.child(name))
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
        if self.live {
            return Path::new(path).exists();
        }
        self.stat_in_root(path).is_ok()
    }

    pub fn is_dir(&self, path: &str) -> bool {
        self.note(path, Access::Lookup);
        if self.live {
            return Path::new(path).is_dir();
        }
        self.stat_in_root(path)
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
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
        let walk = match split_name(path) {
            Some((dir, name)) => self.walk(
                path,
                (*self.walk_dir(path, dir)?).clone(),
                vec![name.into()],
            )?,
            None => self.walk(path, Walk::default(), components(path))?,
        };
        Ok(walk.path())
    }

    /// `path` with its directory resolved but its last component not looked at yet (the caller opens it without
    /// following a link), or all of it resolved when it does not end in a name.
    fn resolve_dir_of(&self, path: &str) -> ReadResult<String> {
        match split_name(path) {
            Some((dir, name)) => Ok(self.walk_dir(path, dir)?.child(name)),
            None => self.resolve_in_root(path),
        }
    }

    /// The walk to directory `dir` (of the asked-for `path`, which errors name), once per run ([`Host::dirs`]):
    /// one step on from its parent's walk, itself kept.
    fn walk_dir(&self, path: &str, dir: &str) -> ReadResult<Arc<Walk>> {
        let known = self.dirs.lock().ok().and_then(|d| d.get(dir).cloned());
        if let Some(walk) = known {
            return Ok(walk);
        }
        let walk = match split_name(dir) {
            Some((parent, name)) => {
                let from = (*self.walk_dir(path, parent)?).clone();
                self.walk(path, from, vec![name.to_string()])?
            }
            None => self.walk(path, Walk::default(), components(dir))?,
        };
        let walk = Arc::new(walk);
        if let Ok(mut dirs) = self.dirs.lock() {
            dirs.insert(dir.to_string(), walk.clone());
        }
        Ok(walk)
    }

    /// Continues `walk` through `parts`, following each symlink met with the root as `/`.
    fn walk(&self, path: &str, mut walk: Walk, parts: Vec<String>) -> ReadResult<Walk> {
        let mut pending = parts;
        pending.reverse();
        while let Some(part) = pending.pop() {
            match part.as_str() {
                "." => continue,
                ".." => {
                    walk.parts.pop();
                    continue;
                }
                _ => {}
            }
            walk.parts.push(part);
            let Some(target) = self.link_at(&walk.path()) else {
                // Not a link, or missing (then the rest cannot be links: the final open reports ENOENT).
                continue;
            };
            walk.hops += 1;
            if walk.hops > MAX_LINK_HOPS {
                return Err(ReadError::new(path, ReadErrorKind::SymlinkLoop));
            }
            walk.parts.pop();
            if target.is_absolute() {
                walk.parts.clear();
            }
            let mut target_parts = components(&target.to_string_lossy());
            target_parts.reverse();
            pending.extend(target_parts);
        }
        Ok(walk)
    }

    /// Where the tree path `here` links (None: not a link, or missing), once per run ([`Host::links`]).
    fn link_at(&self, here: &str) -> Option<PathBuf> {
        let known = self.links.lock().ok().and_then(|l| l.get(here).cloned());
        if let Some(target) = known {
            return target;
        }
        // EINVAL: not a link; ENOENT, ENOTDIR: missing. Each is "not a link" to the walk.
        let target = self.read_link_at(here).ok();
        if let Ok(mut links) = self.links.lock() {
            links.insert(here.to_string(), target.clone());
        }
        target
    }

    /// `stat` of the host path, following a link in the root; the file itself is looked at first without
    /// following it, which answers for everything but a link.
    fn stat_in_root(&self, path: &str) -> ReadResult<libc::stat> {
        let st = self
            .stat_at(&self.resolve_dir_of(path)?, libc::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| ReadError::from_io(path, &e))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
            return Ok(st);
        }
        self.stat_at(&self.resolve_in_root(path)?, 0)
            .map_err(|e| ReadError::from_io(path, &e))
    }

    /// The host path `host_path` relative to the recorded root's directory handle, for the `*at` calls.
    fn at_root(&self, host_path: &str) -> io::Result<(i32, CString)> {
        let dir = self
            .root_dir
            .as_ref()
            .ok_or_else(|| io::Error::other("the live root has no directory handle"))?;
        let relative = host_path.trim_start_matches('/');
        let relative = CString::new(if relative.is_empty() { "." } else { relative })
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok((dir.as_raw_fd(), relative))
    }

    /// `openat(root, host_path, O_RDONLY | O_NONBLOCK | flags)`.
    fn open_at(&self, host_path: &str, flags: i32) -> io::Result<fs::File> {
        let (dir, relative) = self.at_root(host_path)?;
        open_c(dir, &relative, flags)
    }

    /// `fstatat(root, host_path, flags)`.
    fn stat_at(&self, host_path: &str, flags: i32) -> io::Result<libc::stat> {
        let (dir, relative) = self.at_root(host_path)?;
        // SAFETY: zeroed is a valid `stat`; fstatat writes it whole on success.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid directory fd, NUL-terminated path and a `stat` to write into.
        if unsafe { libc::fstatat(dir, relative.as_ptr(), &mut st, flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }

    /// `readlinkat(root, host_path)`: EINVAL when it is not a link.
    fn read_link_at(&self, host_path: &str) -> io::Result<PathBuf> {
        let (dir, relative) = self.at_root(host_path)?;
        let mut buf = [0u8; libc::PATH_MAX as usize];
        // SAFETY: a valid directory fd and NUL-terminated path; readlinkat writes at most `buf.len()` bytes.
        let n =
            unsafe { libc::readlinkat(dir, relative.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n == buf.len() {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        Ok(PathBuf::from(OsString::from_vec(buf[..n].to_vec())))
    }
}

fn open_c(dir: i32, relative: &CString, flags: i32) -> io::Result<fs::File> {
    // SAFETY: a valid directory fd and NUL-terminated path; the fd returned is owned by the File alone.
    let fd = unsafe {
        libc::openat(
            dir,
            relative.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// At most `max + 1` bytes of `file`: one past the limit tells "exactly max" from "more than max" (sysfs reports
/// size 4096 whatever the content, so metadata cannot be trusted). Room for a page is made first, so that an
/// attribute takes one read and the read that sees its end.
fn read_at_most(file: fs::File, max: u64) -> io::Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut buf = Vec::with_capacity((max + 1).min(PAGE + 1) as usize);
    file.take(max + 1).read_to_end(&mut buf)?;
    Ok(buf)
}

/// [`read_at_most`] for a file of a recorded tree, whose files are regular: a read shorter than asked is the
/// end of the file (as the page cache answers), so an attribute takes one read instead of two. Live files are
/// read to the empty read: procfs tables come a page at a time.
fn read_recorded(mut file: fs::File, max: u64) -> io::Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let limit = max.saturating_add(1);
    let mut buf = Vec::new();
    let mut len = 0;
    loop {
        // A page first, then doubling, never past the limit.
        let want = (limit - len as u64).min(if len == 0 { PAGE + 1 } else { len as u64 }) as usize;
        if want == 0 {
            break;
        }
        buf.resize(len + want, 0);
        let n = match file.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        len += n;
        if n < want {
            break;
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// The root directory handle: `O_PATH`, enough for the `*at` calls and never readable itself.
fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(root.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path; the fd returned is owned by the OwnedFd alone.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `/sys/x/name` → (`/sys/x`, `name`) when the path ends in a name (not `.`, `..` or a slash).
fn split_name(path: &str) -> Option<(&str, &str)> {
    let (dir, name) = path.rsplit_once('/')?;
    (!matches!(name, "" | "." | "..")).then_some((dir, name))
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

    /// An absolute link leads inside the root even where the live machine has the file it names: the link is
    /// never followed by the kernel (the file is opened without following it, its directory walked in the root).
    #[test]
    fn absolute_link_to_a_path_missing_from_the_tree_is_missing() {
        let (d, host) = tree();
        let live_file = std::env::current_exe().unwrap();
        symlink(&live_file, d.path().join("etc/escape")).unwrap();
        symlink(live_file.parent().unwrap(), d.path().join("etc/escape-dir")).unwrap();
        let name = live_file.file_name().unwrap().to_str().unwrap();
        for path in ["/etc/escape".to_string(), format!("/etc/escape-dir/{name}")] {
            assert!(
                host.read_bytes(&path, 1 << 30).unwrap_err().is_not_found(),
                "{path}"
            );
            assert!(!host.exists(&path), "{path}");
            assert!(host.canonical(&path).unwrap_err().is_not_found(), "{path}");
        }
        assert!(!host.is_dir("/etc/escape-dir"));
    }

    /// Links met anywhere on the way, and `..` after one, resolve as the kernel would with the root as `/`;
    /// answers stay the same when asked again (the walks are kept per directory).
    #[test]
    fn links_in_directories_and_dot_dot_resolve_inside_root() {
        let (d, host) = tree();
        symlink("/sys/bus/pci/devices", d.path().join("etc/devices")).unwrap();
        symlink("/etc/devices/0000:00:06.0", d.path().join("etc/gpu")).unwrap();
        for _ in 0..2 {
            assert_eq!(
                host.read("/etc/devices/0000:00:06.0/vendor").unwrap(),
                "0x10de"
            );
            assert_eq!(host.read("/etc/gpu/vendor").unwrap(), "0x10de");
            assert_eq!(
                host.read("/etc/gpu/../0000:00:06.0/vendor").unwrap(),
                "0x10de"
            );
            assert_eq!(host.read("/../../etc/gpu/vendor").unwrap(), "0x10de");
            assert_eq!(
                host.canonical("/etc/gpu").unwrap(),
                "/sys/devices/pci0000:00/0000:00:06.0"
            );
            assert!(host.is_dir("/etc/gpu") && host.exists("/etc/gpu/vendor"));
            assert!(!host.is_dir("/etc/gpu/vendor"));
            assert_eq!(
                host.read_link("/etc/devices/0000:00:06.0").unwrap(),
                "../../../devices/pci0000:00/0000:00:06.0"
            );
            assert_eq!(host.read_dir("/etc/gpu").unwrap(), ["vendor"]);
            let missing = host.read("/etc/gpu/device").unwrap_err();
            assert_eq!(
                (missing.path.as_str(), missing.is_not_found()),
                ("/etc/gpu/device", true)
            );
            assert_eq!(
                host.read_link("/etc/gpu/vendor").unwrap_err().kind,
                ReadErrorKind::InvalidArgument
            );
        }
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

    /// A recorded file is read in growing pieces until a short read: sizes around a page and the limit.
    #[test]
    fn files_of_every_size_around_a_page_and_the_limit_read_whole() {
        let (d, host) = tree();
        for size in [0, 1, 4095, 4096, 4097, 8193, 100_000] {
            let content: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let name = format!("etc/size-{size}");
            fs::write(d.path().join(&name), &content).unwrap();
            let path = format!("/{name}");
            assert_eq!(
                host.read_bytes(&path, size as u64).unwrap(),
                content,
                "{size}"
            );
            assert_eq!(host.read_bytes(&path, 1 << 20).unwrap(), content, "{size}");
            if size > 0 {
                assert_eq!(
                    host.read_bytes(&path, size as u64 - 1).unwrap_err().kind,
                    ReadErrorKind::TooLarge(size as u64 - 1),
                    "{size}"
                );
            }
        }
        let fresh = Host::at(d.path()).unwrap();
        assert_eq!(
            fresh.read_bytes("/etc/size-8193", 8192).unwrap_err().kind,
            ReadErrorKind::TooLarge(8192),
            "refused before it was ever read whole"
        );
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
    fn fifos_devices_and_sockets_in_a_recorded_tree_are_refused_unopened() {
        let (dir, host) = tree();
        let at =
            |name: &str| std::ffi::CString::new(dir.path().join(name).to_str().unwrap()).unwrap();
        fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        // SAFETY: valid NUL-terminated paths.
        unsafe {
            assert_eq!(libc::mkfifo(at("proc/modules").as_ptr(), 0o644), 0);
            // /dev/kmsg's numbers: reading it would block on, or leak, the kernel log.
            assert_eq!(
                libc::mknod(
                    at("proc/sys/kernel/hostname").as_ptr(),
                    libc::S_IFCHR | 0o644,
                    libc::makedev(1, 11)
                ),
                0
            );
        }
        let socket = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).unwrap();
        std::os::unix::fs::symlink("/proc/modules", dir.path().join("modules-link")).unwrap();
        for (path, kind) in [
            ("/proc/modules", "a FIFO"),
            ("/modules-link", "a FIFO"),
            ("/proc/sys/kernel/hostname", "a character device"),
            ("/sock", "a socket"),
        ] {
            assert_eq!(
                host.read(path).unwrap_err().reason(),
                format!("<{kind}, not a regular file>"),
                "{path}"
            );
        }
        drop(socket);
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
