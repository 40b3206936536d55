//! Where reports go, for `run`, `pair` and `snapshot` alike: the output targets (`--output`, `--format`), each
//! report file and the termination log found writable before any work starts, atomic writes, delivery, colour
//! and terminal width. Plain values in, never the command line's types: each command resolves its own flags.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use super::{termination, Format, RunReport, Style};

/// Where a report goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stdout,
    File(PathBuf),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Stdout => f.write_str("stdout"),
            Target::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Whether the table on stdout is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Every place one report goes, each found writable when it was made.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub outputs: Vec<(Format, Target)>,
    pub termination_log: Option<PathBuf>,
    pub color: ColorChoice,
    /// The table on stdout shows only what fails the run.
    pub quiet: bool,
    /// `--verbose`: tables (on stdout and in files) detail skipped checks too.
    pub verbose: bool,
}

impl Delivery {
    /// The targets of `output` specs and `format`; every report file and the termination log found writable now,
    /// before anything runs: a typo'd directory, a kernel file, or one file named twice is a usage error, not a
    /// lost report after the work.
    pub fn new(
        output: &[String],
        format: Format,
        termination_log: Option<&Path>,
        color: ColorChoice,
        verbose: bool,
    ) -> anyhow::Result<Delivery> {
        let outputs = parse_outputs(output, format)?;
        let files = outputs.iter().filter_map(|(_, target)| match target {
            Target::File(path) => Some(("--output", path.as_path())),
            Target::Stdout => None,
        });
        let mut named: Vec<(String, &Path)> = Vec::new();
        for (flag, path) in files.chain(termination_log.map(|path| ("--termination-log", path))) {
            let flag = format!("{flag} {}", path.display());
            check_writable(path).with_context(|| flag.clone())?;
            named.push((flag, path));
        }
        refuse_one_file_named_twice(&named)?;
        Ok(Delivery {
            outputs,
            termination_log: termination_log.map(Path::to_path_buf),
            color,
            quiet: false,
            verbose,
        })
    }

    /// Writes `report` to every target (stdout styled, files plain) and the termination log; returns the report's
    /// exit code, or the lost-output code when a report could not be written, as NPD reads it when stdout is
    /// `npd`.
    pub fn deliver(&self, report: &RunReport) -> u8 {
        let style = Style {
            color: use_color(self.color),
            width: terminal_width(),
            quiet: self.quiet,
            verbose: self.verbose,
        };
        let mut written = true;
        for (format, target) in &self.outputs {
            let style = if *target == Target::Stdout {
                style
            } else {
                Style {
                    verbose: self.verbose,
                    ..Style::PLAIN
                }
            };
            let text = super::render(*format, report, style);
            if let Err(e) = write_report(target, &text) {
                eprintln!("fabric-preflight: writing the {format:?} report to {target}: {e}");
                written = false;
            }
        }
        if let Some(path) = &self.termination_log {
            if let Err(e) = super::file::replace(path, &termination::render(report)) {
                eprintln!(
                    "fabric-preflight: writing termination log {}: {e}",
                    path.display()
                );
                written = false;
            }
        }
        let code = if written {
            report.exit_code()
        } else {
            crate::exit::output_lost(report.exit_code())
        };
        if self.outputs.contains(&(Format::Npd, Target::Stdout)) {
            // NPD reads the exit code as the condition: 0 OK, 1 NonOK, 2 Unknown (for `run` and `pair` alike).
            return crate::exit::for_npd(code);
        }
        code
    }
}

/// The reason for exit 2 belongs where `kubectl describe pod` looks, like any other verdict: written to the
/// termination log (when given) and returned.
pub fn usage_error(termination_log: Option<&Path>, e: anyhow::Error) -> anyhow::Error {
    if let Some(path) = termination_log {
        let _ = super::file::replace(path, &termination::render_usage_error(&format!("{e:#}")));
    }
    e
}

/// `--output FORMAT=PATH` or `--output PATH` (in `--format`); `-` as PATH is stdout, and so are `/dev/stdout` and
/// the other names of descriptor 1 (so that stdout taken twice is found, and the link is never replaced).
/// Stdout gets `--format` unless an output took it (a bare PATH, or `-`). A name before `=` that is not a format is refused rather
/// than taken for part of a file name (`jsn=report.json`); a file whose name has `=` is written `./a=b`.
pub fn parse_outputs(specs: &[String], format: Format) -> anyhow::Result<Vec<(Format, Target)>> {
    let mut outputs: Vec<(Format, Target)> = Vec::new();
    let mut stdout_taken = false;
    for spec in specs {
        let (f, path) = match spec.split_once('=') {
            Some((name, path)) if !name.contains('/') => {
                let f = <Format as clap::ValueEnum>::from_str(name, true).map_err(|_| {
                    anyhow::anyhow!(
                        "--output {spec}: unknown report format `{name}` (formats: table, json, junit, \
                         prometheus, npd; a file whose name has `=` is written ./{spec})"
                    )
                })?;
                (f, path)
            }
            _ => {
                stdout_taken = true;
                (format, spec.as_str())
            }
        };
        let target = match path {
            "" => bail!("--output {spec}: missing path after `=`"),
            "-" | "/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1" => Target::Stdout,
            _ => Target::File(PathBuf::from(path)),
        };
        if outputs.iter().any(|(_, t)| *t == target) {
            bail!("--output {spec}: {target} already receives another report");
        }
        stdout_taken |= target == Target::Stdout;
        outputs.push((f, target));
    }
    if !stdout_taken {
        outputs.insert(0, (format, Target::Stdout));
    }
    Ok(outputs)
}

/// Two spellings of one file (`b.json`, `./b.json`, `dir/../b.json`, an absolute path, a link or a hard link to
/// it) among the report files and the termination log: one report would replace the other, so a usage error.
/// Character devices are left out: `/dev/null` twice loses nothing.
fn refuse_one_file_named_twice(named: &[(String, &Path)]) -> anyhow::Result<()> {
    let mut seen: Vec<(&str, FileIdentity)> = Vec::new();
    for (flag, path) in named {
        let Some(identity) = FileIdentity::of(path)? else {
            continue;
        };
        if let Some((first, _)) = seen.iter().find(|(_, other)| *other == identity) {
            bail!("{first} and {flag} name one file: each report needs a file of its own");
        }
        seen.push((flag, identity));
    }
    Ok(())
}

/// What a path resolves to: the device and inode of an existing file, else the canonical directory and name
/// of the file it will create.
#[derive(PartialEq, Eq)]
enum FileIdentity {
    Existing {
        dev: u64,
        ino: u64,
    },
    New {
        dir: PathBuf,
        name: std::ffi::OsString,
    },
}

impl FileIdentity {
    /// `None` for a character device.
    fn of(path: &Path) -> std::io::Result<Option<FileIdentity>> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        match std::fs::metadata(path) {
            Ok(meta) if meta.file_type().is_char_device() => Ok(None),
            Ok(meta) => Ok(Some(FileIdentity::Existing {
                dev: meta.dev(),
                ino: meta.ino(),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Some(FileIdentity::New {
                dir: parent_dir(path).canonicalize()?,
                name: path.file_name().unwrap_or_default().to_owned(),
            })),
            Err(e) => Err(e),
        }
    }
}

/// The directory `path` is in (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Whether `path` can be written, found now rather than after the run (a missing directory, a read-only
/// filesystem, a permission). An existing file is opened for writing without truncation; a FIFO only asked for
/// write permission (opening it would wait for a reader, or hand a waiting reader an empty report). For a new
/// file a scratch file of this process's own (`.NAME.<pid>.<n>.check`) is created beside it and removed, as the
/// report itself will be written beside it and renamed: `access()` alone says yes to root where nothing can be
/// created (`/proc`), and creating the target itself made two processes given one path trip over each other.
/// A report goes to a regular file or a stream (FIFO, character device): a block device, a socket, a file of
/// a kernel filesystem (`/proc/version`, a sysfs attribute) or a new file in one is refused unopened.
fn check_writable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    static CHECKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let refused = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let open_to_write = || {
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(false)
            .open(path)
            .map(drop)
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(std::io::Error::from_raw_os_error(libc::EISDIR)),
        Ok(meta) if meta.file_type().is_fifo() => may_write(path),
        Ok(meta) if meta.file_type().is_char_device() => open_to_write(),
        Ok(meta) if !meta.is_file() => super::file::refuse_a_device_or_socket(meta.file_type()),
        Ok(_) => match kernel_filesystem(path)? {
            Some(fs) => Err(refused(format!(
                "is a file of {fs}: a report never goes there"
            ))),
            None => open_to_write(),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = parent_dir(path);
            if let Some(fs) = kernel_filesystem(dir)? {
                return Err(refused(format!(
                    "{} is a directory of {fs}: a report never goes there",
                    dir.display()
                )));
            }
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let n = CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let scratch = dir.join(format!(".{name}.{}.{n}.check", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&scratch)
                .and_then(|_| std::fs::remove_file(&scratch))
        }
        Err(e) => Err(e),
    }
}

/// The kernel filesystem `path` is on (procfs, sysfs and the like, whose files are kernel interfaces, not
/// storage), in words; `None` for any other.
fn kernel_filesystem(path: &Path) -> std::io::Result<Option<&'static str>> {
    // Not in libc: configfs, efivarfs, pstore.
    const CONFIGFS_MAGIC: libc::c_long = 0x6265_6570;
    const EFIVARFS_MAGIC: libc::c_long = 0xde5e_81e4;
    const PSTOREFS_MAGIC: libc::c_long = 0x6165_676c;
    let kernel: [(libc::c_long, &str); 16] = [
        (libc::PROC_SUPER_MAGIC, "procfs"),
        (libc::SYSFS_MAGIC, "sysfs"),
        (libc::DEBUGFS_MAGIC, "debugfs"),
        (libc::TRACEFS_MAGIC, "tracefs"),
        (libc::CGROUP_SUPER_MAGIC, "cgroupfs"),
        (libc::CGROUP2_SUPER_MAGIC, "cgroup2fs"),
        (libc::SECURITYFS_MAGIC, "securityfs"),
        (libc::BPF_FS_MAGIC, "bpffs"),
        (libc::SELINUX_MAGIC, "selinuxfs"),
        (libc::SMACK_MAGIC, "smackfs"),
        (libc::RDTGROUP_SUPER_MAGIC, "resctrl"),
        (libc::DEVPTS_SUPER_MAGIC, "devpts"),
        (libc::HUGETLBFS_MAGIC, "hugetlbfs"),
        (CONFIGFS_MAGIC, "configfs"),
        (EFIVARFS_MAGIC, "efivarfs"),
        (PSTOREFS_MAGIC, "pstore"),
    ];
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid NUL-terminated path and a statfs struct for the kernel to fill.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &mut fs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(kernel
        .iter()
        .find(|(magic, _)| *magic == fs.f_type)
        .map(|(_, name)| *name))
}

/// `access(W_OK)`: whether this process may open `path` for writing, without opening it.
fn may_write(path: &Path) -> std::io::Result<()> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid NUL-terminated path; access() only reads it.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn write_report(target: &Target, text: &str) -> std::io::Result<()> {
    match target {
        Target::Stdout => write_stdout(text),
        Target::File(path) => super::file::replace(path, text),
    }
}

/// Writes a command's output to stdout. A reader that stopped reading (`| head`) chose to: not an error. Any
/// other failure (stdout on `/dev/full`, a closed descriptor) is.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn use_color(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

/// Columns of the terminal on stdout: `COLUMNS`, else the tty's size, else 80.
pub fn terminal_width() -> u16 {
    if let Some(cols) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return cols;
    }
    if std::io::stdout().is_terminal() {
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ fills the struct we pass.
        if unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut size) } == 0 && size.ws_col > 0 {
            return size.ws_col;
        }
    }
    80
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ends of a pair started with one --output path check it at once: a check that created and removed a
    /// test file made the other one fail with "No such file or directory" now and then.
    #[test]
    fn checking_one_path_from_many_threads_at_once_never_fails_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        check_writable(&path).unwrap();
                    }
                });
            }
        });
        assert!(!path.exists());
        let missing_dir = dir.path().join("no/such/dir/report.json");
        assert!(check_writable(&missing_dir).is_err());
        assert_eq!(
            check_writable(dir.path()).unwrap_err().raw_os_error(),
            Some(libc::EISDIR)
        );
        // Root may "write" anywhere by permission bits, yet nothing can be created in /proc.
        assert!(check_writable(std::path::Path::new("/proc/fabric-preflight.json")).is_err());
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "scratch files left"
        );
    }

    #[test]
    fn outputs_keep_stdout_unless_a_bare_path_takes_it() {
        let o = parse_outputs(&["json=/tmp/a.json".into()], Format::Table).unwrap();
        assert_eq!(o[0], (Format::Table, Target::Stdout));
        assert_eq!(o[1], (Format::Json, Target::File("/tmp/a.json".into())));
        let o = parse_outputs(&["/tmp/r.txt".into()], Format::Json).unwrap();
        assert_eq!(o, vec![(Format::Json, Target::File("/tmp/r.txt".into()))]);
    }
}
