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
use std::time::Instant;

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

/// Why [`for_each_line`] stopped before the end.
#[derive(Debug)]
pub enum LinesStop {
    Io(io::Error),
    /// The deadline passed after this many lines.
    Deadline(u64),
}

impl fmt::Display for LinesStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinesStop::Io(e) => write!(f, "{e}"),
            LinesStop::Deadline(line) => write!(f, "deadline reached at line {line}"),
        }
    }
}

/// Calls `each` with every line of `reader` (numbered from 1, without its `\n`; a line longer than `max_line`
/// cut to its first `max_line` bytes and the rest skipped) in memory of one block plus one line, whatever the
/// input: a 2 GiB line without a newline, or `/dev/zero`, costs no more than a short file.
pub fn for_each_line(
    mut reader: impl Read,
    max_line: usize,
    deadline: Option<Instant>,
    mut each: impl FnMut(u64, &[u8]),
) -> Result<(), LinesStop> {
    const BLOCK: usize = 64 << 10;
    let mut block = vec![0u8; BLOCK];
    // The line being joined across blocks, at most `max_line` bytes; `cut` once it has overflowed.
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let mut no = 0u64;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(LinesStop::Deadline(no));
        }
        let n = match reader.read(&mut block) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LinesStop::Io(e)),
        };
        let mut rest = &block[..n];
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            let piece = &rest[..nl];
            no += 1;
            if line.is_empty() && !cut {
                each(no, &piece[..piece.len().min(max_line)]);
            } else {
                append_bounded(&mut line, &mut cut, piece, max_line);
                each(no, &line);
                line.clear();
                cut = false;
            }
            rest = &rest[nl + 1..];
        }
        append_bounded(&mut line, &mut cut, rest, max_line);
    }
    if !line.is_empty() || cut {
        each(no + 1, &line);
    }
    Ok(())
}

fn append_bounded(line: &mut Vec<u8>, cut: &mut bool, piece: &[u8], max_line: usize) {
    let room = max_line - line.len();
    if piece.len() > room {
        *cut = true;
    }
    line.extend_from_slice(&piece[..piece.len().min(room)]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lines(input: &[u8], max_line: usize) -> Vec<(u64, Vec<u8>)> {
        let mut seen = Vec::new();
        for_each_line(input, max_line, None, |no, l| seen.push((no, l.to_vec()))).unwrap();
        seen
    }

    #[test]
    fn lines_are_numbered_and_the_last_needs_no_newline() {
        assert_eq!(
            lines(b"a\n\nbc", 10),
            vec![(1, b"a".to_vec()), (2, vec![]), (3, b"bc".to_vec())]
        );
        assert!(lines(b"", 10).is_empty());
    }

    #[test]
    fn long_lines_are_cut_whether_inside_one_block_or_across_many() {
        for len in [5, 6, 64 << 10, (64 << 10) + 7, 3 << 17] {
            let mut input = vec![b'x'; len];
            input.extend_from_slice(b"\nend\n");
            let seen = lines(&input, 6);
            assert_eq!(seen.len(), 2, "{len}");
            assert_eq!(seen[0].1.len(), len.min(6), "{len}");
            assert_eq!(seen[1], (2, b"end".to_vec()), "{len}");
        }
    }

    #[test]
    fn an_endless_stream_stops_at_the_deadline_in_bounded_memory() {
        let zero = File::open("/dev/zero").unwrap();
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut longest = 0;
        let stop = for_each_line(zero, 1024, Some(deadline), |_, l| longest = l.len());
        assert!(matches!(stop, Err(LinesStop::Deadline(0))), "{stop:?}");
        assert_eq!(longest, 0);
    }

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
