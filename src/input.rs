//! The one way a file the user names is opened and read: profiles and their `extends`, NCCL and job logs, pair
//! reports, recorded vendor answers. Every such input is bounded in type (a regular file unless the caller
//! takes a stream), in size (a cap per kind of input) and in line length, and opening never blocks (a FIFO
//! without a writer is refused, not waited on). Sysfs and procfs go through [`crate::host::Host`] instead.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What the caller accepts besides a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// Regular files only: a profile, a report, a log the tool found in a directory it does not own.
    Regular,
    /// Also a pipe or FIFO the user named (`nccl <(zcat log.gz)`), read with a deadline by the caller.
    RegularOrPipe,
}

/// Why an input was not read.
#[derive(Debug)]
pub enum InputError {
    Io(io::Error),
    /// Not a kind of file this input can be (`a FIFO`, `a character device`, `a directory`).
    NotAFile(&'static str),
    /// Larger than the cap of this kind of input.
    TooLarge(u64),
    /// Not UTF-8 text where text is required.
    NotText,
    /// A secret that other users may read: the file's permission bits.
    Exposed(u32),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Io(e) => write!(f, "{e}"),
            InputError::NotAFile(kind) => write!(f, "is {kind}, not a regular file"),
            InputError::TooLarge(max) => write!(f, "larger than {}", bytes(*max)),
            InputError::NotText => write!(f, "not UTF-8 text"),
            InputError::Exposed(mode) => write!(
                f,
                "readable by group or others (mode {mode:04o}): a secret is only one while `chmod 600` keeps it"
            ),
        }
    }
}

impl std::error::Error for InputError {}

impl From<io::Error> for InputError {
    fn from(e: io::Error) -> Self {
        InputError::Io(e)
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// The kind of a file that is not regular, in words.
pub fn kind_of(file_type: std::fs::FileType) -> Option<&'static str> {
    Some(if file_type.is_file() {
        return None;
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    })
}

/// Opens `path` for reading without blocking on a FIFO and without handing the descriptor to children; a
/// file of a kind `accept` does not take is refused after `fstat` of the opened file (not of the path, which
/// may change between the two).
pub fn open(path: &Path, accept: Accept) -> Result<File, InputError> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let file_type = file.metadata()?.file_type();
    match kind_of(file_type) {
        None => {}
        Some(_) if accept == Accept::RegularOrPipe && file_type.is_fifo() => {
            // The caller reads a pipe with its own deadline; reads block from here on like a plain open's.
            set_blocking(&file)?;
        }
        Some(kind) => return Err(InputError::NotAFile(kind)),
    }
    Ok(file)
}

fn set_blocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this File owns; F_GETFL/F_SETFL take and return plain ints.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The whole of a regular file of at most `max` bytes: a larger one is an error, never a truncated answer.
pub fn read_bytes(path: &Path, max: u64) -> Result<Vec<u8>, InputError> {
    read_all(open(path, Accept::Regular)?, max)
}

fn read_all(file: File, max: u64) -> Result<Vec<u8>, InputError> {
    let mut buf = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(InputError::TooLarge(max));
    }
    Ok(buf)
}

/// [`read_bytes`] as UTF-8 text.
pub fn read_text(path: &Path, max: u64) -> Result<String, InputError> {
    String::from_utf8(read_bytes(path, max)?).map_err(|_| InputError::NotText)
}

/// A secret of at most `max` bytes from a regular file that only its owner may read: a file group or others
/// may read is refused by the mode of the opened file (as ssh refuses a private key), so the secret is never
/// used from where another user could have read it.
pub fn read_secret(path: &Path, max: u64) -> Result<String, InputError> {
    use std::os::unix::fs::PermissionsExt;
    let file = open(path, Accept::Regular)?;
    let mode = file.metadata()?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(InputError::Exposed(mode));
    }
    String::from_utf8(read_all(file, max)?).map_err(|_| InputError::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_without_blocking_unless_pipes_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_bytes(&fifo, 10).unwrap_err();
        assert_eq!(err.to_string(), "is a FIFO, not a regular file");
        assert!(open(&fifo, Accept::RegularOrPipe).is_ok());
        let err = read_bytes(Path::new("/dev/zero"), 10).unwrap_err();
        assert_eq!(err.to_string(), "is a character device, not a regular file");
        assert!(matches!(
            read_bytes(dir.path(), 10),
            Err(InputError::NotAFile("a directory")) | Err(InputError::Io(_))
        ));
    }

    #[test]
    fn a_file_over_the_cap_is_an_error_not_a_cut_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, vec![b'a'; 2048]).unwrap();
        assert_eq!(read_bytes(&path, 2048).unwrap().len(), 2048);
        assert_eq!(
            read_bytes(&path, 2047).unwrap_err().to_string(),
            "larger than 2047 bytes"
        );
        assert_eq!(
            read_text(&path, 1024).unwrap_err().to_string(),
            "larger than 1 KiB"
        );
    }
}
