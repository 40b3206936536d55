//! Report files are replaced whole: a reader (node_exporter's textfile collector, a CI step, a DaemonSet's next
//! run, the kubelet reading a termination log) sees the previous report or the new one, never a half-written file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Writes `text` to a temporary file beside `path` and renames it over `path`. The temporary name starts with
/// a dot and ends in `.tmp`, so the textfile collector (which reads `*.prom`) never picks it up; a second
/// stopping signal during the write removes it ([`crate::interrupt::remove_if_killed`]). Streams (`/dev/stdout`,
/// a FIFO, `/dev/null`) cannot be renamed over and are written in place, through links (`/dev/stdout` is one);
/// so is an existing regular file that cannot be replaced (Kubernetes' bind-mounted /dev/termination-log, a
/// writable file in a directory this user may not write), but never through a link: a link there is refused
/// rather than its target rewritten. A hard link is one file under two names and is written as that file. A
/// path that names one of this process's descriptors (`/dev/stderr`) is written to what that descriptor is.
pub fn replace(path: &Path, text: &str) -> io::Result<()> {
    if names_a_descriptor(path) {
        return write_in_place(path, text, InPlace::Descriptor);
    }
    let existing = fs::metadata(path).ok().map(|m| m.file_type());
    if let Some(file_type) = existing {
        refuse_a_device_or_socket(file_type)?;
    }
    if existing.is_some_and(is_stream) {
        return write_in_place(path, text, InPlace::Stream);
    }
    match rename_over(path, text) {
        Err(e)
            if existing.is_some_and(|t| t.is_file())
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EACCES | libc::EPERM | libc::EROFS | libc::EBUSY | libc::EXDEV)
                ) =>
        {
            write_in_place(path, text, InPlace::RegularFile).map_err(|in_place| {
                io::Error::new(
                    in_place.kind(),
                    format!("cannot replace it ({e}), nor write it in place: {in_place}"),
                )
            })
        }
        done => done,
    }
}

/// `/dev/fd/N`, `/proc/self/fd/N`, or a link to one (`/dev/stdout`, `/dev/stderr`): renaming over the path
/// would replace the link in `/dev` with a file, and the output would go nowhere the caller sees.
fn names_a_descriptor(path: &Path) -> bool {
    let is_descriptor = |p: &Path| {
        ["/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"]
            .iter()
            .any(|dir| p.starts_with(dir))
    };
    is_descriptor(path) || fs::read_link(path).is_ok_and(|target| is_descriptor(&target))
}

/// A block device or a socket is no place for a report: neither replaced (a disk's node in /dev) nor written.
pub fn refuse_a_device_or_socket(file_type: fs::FileType) -> io::Result<()> {
    if file_type.is_block_device() || file_type.is_socket() {
        let kind = crate::input::kind_of(file_type).unwrap_or("not a regular file");
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {kind}: a report goes to a regular file, a FIFO or a character device"),
        ));
    }
    Ok(())
}

/// A FIFO or a character device: written as it is, never replaced.
fn is_stream(file_type: fs::FileType) -> bool {
    file_type.is_fifo() || file_type.is_char_device()
}

/// What an in-place write expects to open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InPlace {
    /// A FIFO or character device, reached through links if need be; never truncated.
    Stream,
    /// The regular file at `path` itself, not through a link; truncated only once it is known to be one.
    RegularFile,
    /// Whatever one of this process's descriptors is (a pipe, a terminal, a file the shell redirected to),
    /// appended to as a shell's `>/dev/stderr` would.
    Descriptor,
}

/// Writes `text` into the existing `path` as it is. The open does not wait: a FIFO nobody reads is an error
/// (ENXIO) rather than a run that never ends; once open, the write blocks as usual for a slow reader. The kind
/// is judged by `fstat` of what was opened, so a path swapped after [`replace`] looked at it is refused, and
/// nothing is truncated before that.
fn write_in_place(path: &Path, text: &str, expect: InPlace) -> io::Result<()> {
    let flags = libc::O_NONBLOCK
        | libc::O_CLOEXEC
        | match expect {
            InPlace::Stream => 0,
            InPlace::RegularFile => libc::O_NOFOLLOW,
            InPlace::Descriptor => libc::O_APPEND,
        };
    let mut file = OpenOptions::new()
        .write(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => {
                io::Error::new(e.kind(), "no process has this FIFO open for reading")
            }
            Some(libc::ELOOP) => io::Error::new(
                e.kind(),
                "it is a symbolic link, and a report is not written through one",
            ),
            _ => e,
        })?;
    let file_type = file.metadata()?.file_type();
    let expected = match expect {
        InPlace::Stream => is_stream(file_type),
        InPlace::RegularFile => file_type.is_file(),
        InPlace::Descriptor => !file_type.is_dir(),
    };
    if !expected {
        let kind = crate::input::kind_of(file_type).unwrap_or("a regular file");
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it changed to {kind} while the report was written"),
        ));
    }
    if expect == InPlace::RegularFile {
        file.set_len(0)?;
    }
    // SAFETY: F_GETFL/F_SETFL on a descriptor this function owns.
    let blocking = unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if !blocking {
        return Err(io::Error::last_os_error());
    }
    file.write_all(text.as_bytes())
}

fn rename_over(path: &Path, text: &str) -> io::Result<()> {
    let temp = temp_path(path)?;
    let _removed_if_killed = crate::interrupt::remove_if_killed(&temp);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        // Readable by the collector, which runs as another user; the umask still applies.
        .mode(0o644)
        .open(&temp)
        .and_then(|mut f: File| {
            f.write_all(text.as_bytes())?;
            // Data on disk before the name points at it: a crash leaves the old report, not an empty one.
            f.sync_all()
        })
        .and_then(|()| fs::rename(&temp, path));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// `dir/.name.<pid>.tmp`: same directory (rename is atomic only within a filesystem), unique per process.
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let temp = format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id());
    Ok(path.with_file_name(temp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fabric_preflight.prom");
        fs::write(&path, "old\n").unwrap();
        replace(&path, "new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["fabric_preflight.prom"]);
    }

    #[test]
    fn a_reader_holding_the_old_file_keeps_reading_the_old_report() {
        // What node_exporter sees when a scrape overlaps a write: the file it opened stays whole.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.prom");
        fs::write(&path, "old\n").unwrap();
        let held = File::open(&path).unwrap();
        replace(&path, "new\n").unwrap();
        assert_eq!(io::read_to_string(held).unwrap(), "old\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
    }

    #[test]
    fn failure_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: the rename fails.
        let path = dir.path().join("r.prom");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), "").unwrap();
        assert!(replace(&path, "new\n").is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// What the fallback for a file that cannot be replaced does with a link, and with a path that was a
    /// stream when looked at and a regular file when opened: refuses both, truncating nothing.
    #[test]
    fn in_place_writes_refuse_links_and_swapped_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let link = dir.path().join("report.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_in_place(&link, "new", InPlace::RegularFile).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = write_in_place(&victim, "new", InPlace::Stream).unwrap_err();
        assert!(
            err.to_string().contains("changed to a regular file"),
            "{err}"
        );
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        assert!(write_in_place(&fifo, "new", InPlace::RegularFile).is_err());
        assert!(write_in_place(dir.path(), "new", InPlace::RegularFile).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        write_in_place(&victim, "new", InPlace::RegularFile).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "new");
    }

    #[test]
    fn character_devices_are_written_in_place() {
        replace(Path::new("/dev/null"), "x").unwrap();
    }

    fn mkfifo(path: &Path) {
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    }

    /// More than a pipe holds: the descriptor must be blocking again once open (the CLI tests cover a FIFO
    /// without a reader).
    #[test]
    fn a_fifo_with_a_reader_gets_the_whole_report() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("report.fifo");
        mkfifo(&fifo);
        let target = fifo.clone();
        // Opening for reading waits for the writer, then reads to its close.
        let reader = std::thread::spawn(move || fs::read_to_string(target).unwrap());
        let text = "x".repeat(1 << 20);
        // The reader may not have opened yet: retry until it has.
        let started = std::time::Instant::now();
        while let Err(e) = replace(&fifo, &text) {
            assert!(started.elapsed().as_secs() < 60, "{e}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(reader.join().unwrap(), text);
    }
}
