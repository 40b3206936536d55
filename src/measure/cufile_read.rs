//! The cuFile read measurement behind `gds.read`: write a patterned test file, read it into GPU memory with
//! cuFile (level-3 statistics and nvidia-fs's counter before and after, to tell the path), copy the last block
//! back to check it, then read the same file with plain `pread(O_DIRECT)` into pinned host memory plus a copy
//! to the GPU as the baseline. Everything learned is a [`ReadRun`], recorded as the vendor answer; no verdicts.
//!
//! Runs in the probe child process: libcufile prints on stdout and may hang; the runner creates and removes
//! the scratch directory that holds the test file and cuFile's log.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::dynlib::cuda::{self, DeviceBuffer, DeviceContext, PinnedHostBuffer};
use crate::dynlib::cufile::{
    self, CuFile, CuFileError, DriverProps, LoadError, PathCounters, StatsLayout,
};
use crate::dynlib::LibError;
use crate::host::Host;
use crate::sysfs::nvfs::{parse_reads_n, NVFS_STATS};

/// O_DIRECT wants offsets and sizes aligned to the logical block size; 4 KiB covers every device.
const ALIGN: u64 = 4096;
/// cuFile's log lines kept for the report.
const LOG_TAIL_LINES: usize = 6;

/// File and request sizes, aligned for O_DIRECT; the file is a whole number of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub file_bytes: u64,
    pub block_bytes: u64,
}

impl Shape {
    pub fn new(file_bytes: u64, block_bytes: u64) -> Shape {
        let block = block_bytes.div_ceil(ALIGN) * ALIGN;
        let blocks = file_bytes.div_ceil(block).max(1);
        Shape {
            file_bytes: blocks * block,
            block_bytes: block,
        }
    }
    pub fn blocks(&self) -> u64 {
        self.file_bytes / self.block_bytes
    }
}

/// Where the run stopped, when it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    Setup,
    LoadCufile,
    Cuda,
    DriverOpen,
    /// Refused before writing (the test file would nearly fill the filesystem), or ENOSPC while writing.
    DiskSpace,
    CreateFile,
    OpenDirect,
    HandleRegister,
    BufRegister,
    Read,
}

/// Bytes moved in a time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub bytes: u64,
    pub seconds: f64,
}

impl Timing {
    pub fn gbytes_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// Everything the live run learned; recorded as the vendor answer so a replay judges the same facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadRun {
    pub failed_at: Option<Stage>,
    pub error: Option<String>,
    /// The CUDA driver's error when the run stopped at [`Stage::Cuda`].
    #[serde(default)]
    pub cuda_error: Option<LibError>,
    /// The cuFile status of the failed call.
    pub cufile_error: Option<CuFileError>,
    /// errno of a failed system call (open O_DIRECT, pread).
    pub errno: Option<i32>,
    /// `(name, dlerror)` per candidate when libcufile did not load.
    pub load_attempts: Vec<(String, String)>,
    pub library: Option<String>,
    pub version: Option<i32>,
    pub gpu: Option<String>,
    pub props: Option<DriverProps>,
    pub shape: Option<Shape>,
    pub cufile: Option<Timing>,
    pub counters: Option<PathCounters>,
    pub stats_error: Option<String>,
    pub nvfs_reads_delta: Option<u64>,
    pub verified: Option<bool>,
    pub baseline: Option<Timing>,
    pub baseline_error: Option<String>,
    pub cut_short: bool,
    pub log_tail: Vec<String>,
}

impl ReadRun {
    pub fn empty() -> Self {
        ReadRun {
            failed_at: None,
            error: None,
            cuda_error: None,
            cufile_error: None,
            errno: None,
            load_attempts: Vec::new(),
            library: None,
            version: None,
            gpu: None,
            props: None,
            shape: None,
            cufile: None,
            counters: None,
            stats_error: None,
            nvfs_reads_delta: None,
            verified: None,
            baseline: None,
            baseline_error: None,
            cut_short: false,
            log_tail: Vec::new(),
        }
    }

    pub fn failed(stage: Stage, error: impl Into<String>) -> Self {
        let mut r = Self::empty();
        r.fail(stage, error);
        r
    }

    pub fn fail(&mut self, stage: Stage, error: impl Into<String>) {
        self.failed_at = Some(stage);
        self.error = Some(error.into());
    }

    pub fn fail_cuda(&mut self, error: LibError) {
        self.fail(Stage::Cuda, error.to_string());
        self.cuda_error = Some(error);
    }
}

/// Loads libcufile (its log pointed into `scratch`), writes the test file into `scratch`, reads it into GPU 0
/// with cuFile and then with the POSIX baseline, stopping short of `deadline`.
pub fn collect(host: &Host, scratch: &Path, shape: Shape, deadline: Instant) -> ReadRun {
    let mut run = ReadRun::empty();
    run.shape = Some(shape);
    let log_path = scratch.join("cufile.log");
    let lib = match CuFile::load(Some(&log_path)) {
        Ok(l) => l,
        Err(LoadError::NotFound(tried)) => {
            run.load_attempts = tried;
            run.fail(Stage::LoadCufile, "libcufile not found");
            return run;
        }
        Err(e) => {
            run.fail(Stage::LoadCufile, e.to_string());
            return run;
        }
    };
    run.library = Some(lib.library.clone());
    // The statistics struct's layout depends on the version: read only a layout known for it.
    let layout = match lib.version() {
        Ok(v) => {
            run.version = Some(v);
            match StatsLayout::for_version(v) {
                Err(refusal) => {
                    run.fail(Stage::LoadCufile, refusal);
                    return run;
                }
                Ok(Ok(layout)) => Some(layout),
                Ok(Err(why)) => {
                    run.stats_error = Some(why);
                    None
                }
            }
        }
        Err(e) => {
            run.stats_error = Some(format!(
                "cuFileGetVersion = {e}: statistics layout unknown, counters not read"
            ));
            None
        }
    };
    measure(host, &lib, scratch, shape, deadline, layout, &mut run);
    run.log_tail = log_tail(&log_path);
    run
}

fn measure(
    host: &Host,
    lib: &CuFile,
    scratch: &Path,
    shape: Shape,
    deadline: Instant,
    layout: Option<StatsLayout>,
    run: &mut ReadRun,
) {
    let time_left = || deadline.saturating_duration_since(Instant::now());
    let block = shape.block_bytes as usize;
    let ctx = match cuda::load().and_then(|()| DeviceContext::new(0)) {
        Ok(c) => c,
        Err(e) => return run.fail_cuda(e),
    };
    let device = ctx.device();
    run.gpu = Some(format!(
        "{} ({})",
        device.name().unwrap_or_else(|_| "GPU 0".into()),
        device.pci_bus_id().unwrap_or_default()
    ));
    let dev_buf = match DeviceBuffer::alloc(block) {
        Ok(b) => b,
        Err(e) => return run.fail_cuda(e),
    };
    // Dropped before dev_buf and ctx (declared after them), on every return path.
    let driver = match lib.open_driver() {
        Ok(d) => d,
        Err(e) => {
            run.cufile_error = Some(e);
            return run.fail(Stage::DriverOpen, format!("cuFileDriverOpen = {e}"));
        }
    };
    run.props = lib.driver_properties().ok();
    if let Some(Err(e)) = layout.and_then(|_| lib.start_stats()) {
        run.stats_error = Some(format!("cuFile statistics unavailable: {e}"));
    }

    if let Err(refusal) = free_space(scratch).and_then(|s| s.room_for(shape.file_bytes)) {
        return run.fail(Stage::DiskSpace, refusal);
    }
    let path = scratch.join("gds-read.bin");
    if let Err((stage, e)) = create_test_file(&path, shape, deadline) {
        return run.fail(stage, e);
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            run.errno = e.raw_os_error();
            return run.fail(
                Stage::OpenDirect,
                format!("open({}, O_DIRECT): {e}", path.display()),
            );
        }
    };
    let handle = match lib.handle_register(file.as_raw_fd()) {
        Ok(h) => h,
        Err(e) => {
            run.cufile_error = Some(e);
            return run.fail(Stage::HandleRegister, format!("cuFileHandleRegister = {e}"));
        }
    };
    if let Err(e) = lib.buf_register(dev_buf.ptr(), block) {
        lib.handle_deregister(handle);
        run.cufile_error = Some(e);
        return run.fail(
            Stage::BufRegister,
            format!("cuFileBufRegister({block} bytes) = {e}"),
        );
    }

    let nvfs_before = host.read(NVFS_STATS).ok().and_then(|s| parse_reads_n(&s));
    let counters = || layout.and_then(|l| lib.path_counters(l));
    let counters_before = counters();
    let started = Instant::now();
    let mut done = 0u64;
    for i in 0..shape.blocks() {
        if time_left() < Duration::from_secs(3) {
            run.cut_short = true;
            break;
        }
        match lib.read(&handle, dev_buf.ptr(), block, i * shape.block_bytes, 0) {
            Ok(n) if n == block => done += n as u64,
            Ok(n) => {
                run.fail(
                    Stage::Read,
                    format!(
                        "cuFileRead at offset {} returned {n} of {block} bytes",
                        i * shape.block_bytes
                    ),
                );
                break;
            }
            Err(e) => {
                if let cufile::ReadFailure::Errno(errno) = e {
                    run.errno = Some(errno);
                }
                if let cufile::ReadFailure::CuFile(code) = e {
                    run.cufile_error = Some(CuFileError { code, cu_err: 0 });
                }
                run.fail(
                    Stage::Read,
                    format!("cuFileRead at offset {} = {e}", i * shape.block_bytes),
                );
                break;
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    run.cufile = (done > 0).then_some(Timing {
        bytes: done,
        seconds: elapsed,
    });
    match (counters_before, counters()) {
        (Some(Ok(before)), Some(Ok(after))) => run.counters = Some(after.since(&before)),
        (Some(Err(e)), _) | (_, Some(Err(e))) => {
            run.stats_error = Some(format!("cuFileGetStatsL3 = {e}"))
        }
        _ => {
            run.stats_error = run
                .stats_error
                .take()
                .or(Some("this cuFile has no statistics API".into()))
        }
    }
    let nvfs_after = host.read(NVFS_STATS).ok().and_then(|s| parse_reads_n(&s));
    if let (Some(b), Some(a)) = (nvfs_before, nvfs_after) {
        run.nvfs_reads_delta = Some(a.saturating_sub(b));
    }
    let _ = lib.buf_deregister(dev_buf.ptr());
    lib.handle_deregister(handle);

    // The last block read is still in GPU memory: copy it back and check the pattern.
    let mut pinned = match PinnedHostBuffer::alloc(block) {
        Ok(p) => p,
        Err(e) => {
            run.baseline_error = Some(e.to_string());
            return;
        }
    };
    if done > 0 {
        let last = done / shape.block_bytes - 1;
        run.verified = Some(
            cuda::copy_dtoh(&mut pinned, &dev_buf).is_ok()
                && pattern_matches(pinned.as_slice(), last * shape.block_bytes),
        );
    }
    drop(driver);
    if run.failed_at.is_none() {
        match baseline(&file, &dev_buf, &mut pinned, shape, deadline) {
            Ok(t) => run.baseline = Some(t),
            Err(e) => run.baseline_error = Some(e),
        }
    }
}

/// The same reads with `pread(O_DIRECT)` into pinned host memory, each followed by a copy to the GPU.
fn baseline(
    file: &File,
    dev_buf: &DeviceBuffer,
    pinned: &mut PinnedHostBuffer,
    shape: Shape,
    deadline: Instant,
) -> Result<Timing, String> {
    let started = Instant::now();
    let mut done = 0u64;
    for i in 0..shape.blocks() {
        if deadline.saturating_duration_since(Instant::now()) < Duration::from_secs(2) {
            break;
        }
        let off = i * shape.block_bytes;
        file.read_exact_at(pinned.as_mut_slice(), off)
            .map_err(|e| format!("pread(O_DIRECT) at offset {off}: {e}"))?;
        cuda::copy_htod(dev_buf, pinned)?;
        done += shape.block_bytes;
    }
    Ok(Timing {
        bytes: done,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Each 8-byte word holds its own file offset XOR a constant: a misplaced or stale block shows.
const PATTERN_KEY: u64 = 0x6664_7300_9e37_79b9;

pub fn fill_pattern(buf: &mut [u8], file_offset: u64) {
    for (i, word) in buf.chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&((file_offset + 8 * i as u64) ^ PATTERN_KEY).to_le_bytes());
    }
}

pub fn pattern_matches(buf: &[u8], file_offset: u64) -> bool {
    buf.chunks_exact(8)
        .enumerate()
        .all(|(i, w)| w == ((file_offset + 8 * i as u64) ^ PATTERN_KEY).to_le_bytes())
}

/// Free and total bytes of a filesystem, for the test file's room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeSpace {
    /// Bytes an unprivileged writer may still use (`f_bavail`).
    pub available: u64,
    pub total: u64,
}

impl FreeSpace {
    /// What must stay free after the test file: 5 % of the filesystem, at least 1 GiB (a node's disk is never
    /// ours to fill).
    pub fn margin(&self) -> u64 {
        (self.total / 20).max(1 << 30)
    }

    /// Ok when a file of `bytes` leaves the margin free; else the refusal, with the numbers.
    pub fn room_for(&self, bytes: u64) -> Result<(), String> {
        if self.available >= bytes.saturating_add(self.margin()) {
            return Ok(());
        }
        Err(format!(
            "not writing the {} test file: {} free of {} would leave {}, under the safe margin of {} (5% of the filesystem, at least 1 GiB)",
            gib(bytes),
            gib(self.available),
            gib(self.total),
            gib(self.available.saturating_sub(bytes)),
            gib(self.margin())
        ))
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// `statvfs` of the directory the test file goes to.
pub fn free_space(dir: &Path) -> Result<FreeSpace, String> {
    let c_path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: path holds a NUL byte", dir.display()))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: a valid NUL-terminated path and an out-pointer to a zeroed struct.
    if unsafe { libc::statvfs(c_path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(format!(
            "statvfs({}): {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: filled by a successful statvfs.
    let st = unsafe { st.assume_init() };
    // fsblkcnt_t and the block size are 32-bit on some targets.
    #[allow(clippy::unnecessary_cast)]
    let (unit, available, total) = (st.f_frsize as u64, st.f_bavail as u64, st.f_blocks as u64);
    Ok(FreeSpace {
        available: available.saturating_mul(unit),
        total: total.saturating_mul(unit),
    })
}

/// Writes the test file; on failure removes what was written (a half-written file must not keep the disk full)
/// and says at which stage it failed: ENOSPC is the disk's, anything else the file's.
fn create_test_file(path: &Path, shape: Shape, deadline: Instant) -> Result<(), (Stage, String)> {
    write_test_file(path, shape, deadline).map_err(|e| {
        let _ = std::fs::remove_file(path);
        let stage = if e.raw_os_error() == Some(libc::ENOSPC) {
            Stage::DiskSpace
        } else {
            Stage::CreateFile
        };
        (stage, format!("writing {} (removed): {e}", path.display()))
    })
}

fn write_test_file(path: &Path, shape: Shape, deadline: Instant) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    let mut buf = vec![0u8; shape.block_bytes as usize];
    for i in 0..shape.blocks() {
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "deadline reached while writing",
            ));
        }
        fill_pattern(&mut buf, i * shape.block_bytes);
        f.write_all(&buf)?;
    }
    // On disk before O_DIRECT reads, which bypass the page cache.
    f.sync_all()
}

/// Only the end of the log is read: at TRACE level libcufile writes megabytes, and not always UTF-8.
const LOG_TAIL_BYTES: u64 = 64 << 10;

fn log_tail(path: &Path) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut bytes = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))
            .is_ok()
        {
            let _ = f.take(LOG_TAIL_BYTES).read_to_end(&mut bytes);
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..]
        .iter()
        .map(|l| l.trim().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_file_needs_room_beyond_the_margin() {
        const GIB: u64 = 1 << 30;
        let small = FreeSpace {
            available: GIB + GIB / 2,
            total: 10 * GIB,
        };
        let refusal = small.room_for(GIB).unwrap_err();
        assert!(
            refusal.contains("1.50 GiB free of 10.00 GiB would leave 0.50 GiB, under the safe margin of 1.00 GiB"),
            "{refusal}"
        );
        let big = FreeSpace {
            available: 50 * GIB,
            total: 100 * GIB,
        };
        assert_eq!(big.margin(), 5 * GIB);
        assert!(big.room_for(GIB).is_ok());
        let here = free_space(Path::new(".")).unwrap();
        assert!(here.total >= here.available && here.total > 0);
    }

    #[test]
    fn a_failed_write_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gds-read.bin");
        let past = Instant::now() - Duration::from_secs(1);
        let (stage, e) = create_test_file(&path, Shape::new(1 << 20, 1 << 20), past).unwrap_err();
        assert_eq!(stage, Stage::CreateFile);
        assert!(e.contains("(removed)"), "{e}");
        assert!(!path.exists());
    }

    /// ENOSPC while writing, on a filesystem that really fills up (`/dev/full` answers every write with it).
    #[test]
    fn enospc_is_a_disk_space_stop_and_the_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gds-read.bin");
        std::os::unix::fs::symlink("/dev/full", &path).unwrap();
        let far = Instant::now() + Duration::from_secs(60);
        let (stage, e) = create_test_file(&path, Shape::new(1 << 20, 1 << 20), far).unwrap_err();
        assert_eq!(stage, Stage::DiskSpace, "{e}");
        assert!(std::fs::symlink_metadata(&path).is_err(), "left behind");
    }

    #[test]
    fn shape_aligns_and_rounds_up() {
        let s = Shape::new(1000, 5000);
        assert_eq!(s.block_bytes, 8192);
        assert_eq!(s.file_bytes, 8192);
        let s = Shape::new(1 << 30, 64 << 20);
        assert_eq!(s.blocks(), 16);
    }

    #[test]
    fn pattern_round_trips_and_detects_misplacement() {
        let mut b = vec![0u8; 4096];
        fill_pattern(&mut b, 1 << 20);
        assert!(pattern_matches(&b, 1 << 20));
        assert!(!pattern_matches(&b, 0));
    }
}
