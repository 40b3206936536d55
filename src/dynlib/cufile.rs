//! libcufile, opened at run time with libloading. cudarc's own loader never tries the SONAME `libcufile.so.0`
//! (runtime-only images and the pip wheel have nothing else) and panics where it finds no library, so only
//! cudarc's type definitions (`cuda-13000` layouts = cuFile 1.15) are used here. The statistics struct grew in
//! cuFile 1.19: [`StatsLayout`] picks the layout from `cuFileGetVersion` and refuses an unknown major version.
//!
//! libcufile prints on stdout and writes `cufile.log` into the working directory unless `CUFILE_LOGFILE_PATH`
//! is set: [`CuFile::load`] sets it first, and callers run in the probe child process (see `runner/probe_child.rs`).

use std::ffi::{c_int, c_uint, c_void};
use std::fmt;
use std::mem::MaybeUninit;
use std::path::Path;

use cudarc::cufile::sys as cf;
use libloading::Library;
use serde::{Deserialize, Serialize};

use crate::child::breadcrumb;

/// The SONAME first, then the development link.
pub const LIB_CANDIDATES: [&str; 2] = ["libcufile.so.0", "libcufile.so"];
pub const LOGFILE_ENV: &str = "CUFILE_LOGFILE_PATH";

/// `CUfileError_t` with plain integers: a status the enum does not list must not become undefined behaviour.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RawStatus {
    err: c_uint,
    cu_err: c_uint,
}

/// A cuFile status other than success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CuFileError {
    pub code: u32,
    /// The CUDA driver error behind `CU_FILE_CUDA_DRIVER_ERROR`, else 0.
    pub cu_err: u32,
}

impl CuFileError {
    pub fn name(&self) -> &'static str {
        error_name(self.code)
    }
}

impl fmt::Display for CuFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code)?;
        if self.cu_err != 0 {
            write!(f, ", CUDA error {}", self.cu_err)?;
        }
        Ok(())
    }
}

pub const HANDLE_NOT_REGISTERED: u32 = 5027;
pub const DRIVER_NOT_INITIALIZED: u32 = 5001;
pub const NVFS_SETUP_ERROR: u32 = 5033;
pub const INVALID_FILE_OPEN_FLAG: u32 = 5019;
pub const DIO_NOT_SET: u32 = 5020;
pub const GPU_MEMORY_PINNING_FAILED: u32 = 5036;
pub const INTERNAL_BUF_REGISTER_ERROR: u32 = 5045;
pub const INVALID_MAPPING_SIZE: u32 = 5016;
pub const PLATFORM_NOT_SUPPORTED: u32 = 5007;
pub const IO_NOT_SUPPORTED: u32 = 5008;
pub const DEVICE_NOT_SUPPORTED: u32 = 5009;
pub const CUDA_DRIVER_ERROR: u32 = 5011;

/// Names from `cufile.h` (CUDA 13.0).
pub fn error_name(code: u32) -> &'static str {
    match code {
        0 => "CU_FILE_SUCCESS",
        5001 => "CU_FILE_DRIVER_NOT_INITIALIZED",
        5002 => "CU_FILE_DRIVER_INVALID_PROPS",
        5003 => "CU_FILE_DRIVER_UNSUPPORTED_LIMIT",
        5004 => "CU_FILE_DRIVER_VERSION_MISMATCH",
        5005 => "CU_FILE_DRIVER_VERSION_READ_ERROR",
        5006 => "CU_FILE_DRIVER_CLOSING",
        5007 => "CU_FILE_PLATFORM_NOT_SUPPORTED",
        5008 => "CU_FILE_IO_NOT_SUPPORTED",
        5009 => "CU_FILE_DEVICE_NOT_SUPPORTED",
        5010 => "CU_FILE_NVFS_DRIVER_ERROR",
        5011 => "CU_FILE_CUDA_DRIVER_ERROR",
        5012 => "CU_FILE_CUDA_POINTER_INVALID",
        5013 => "CU_FILE_CUDA_MEMORY_TYPE_INVALID",
        5014 => "CU_FILE_CUDA_POINTER_RANGE_ERROR",
        5015 => "CU_FILE_CUDA_CONTEXT_MISMATCH",
        5016 => "CU_FILE_INVALID_MAPPING_SIZE",
        5017 => "CU_FILE_INVALID_MAPPING_RANGE",
        5018 => "CU_FILE_INVALID_FILE_TYPE",
        5019 => "CU_FILE_INVALID_FILE_OPEN_FLAG",
        5020 => "CU_FILE_DIO_NOT_SET",
        5022 => "CU_FILE_INVALID_VALUE",
        5023 => "CU_FILE_MEMORY_ALREADY_REGISTERED",
        5024 => "CU_FILE_MEMORY_NOT_REGISTERED",
        5025 => "CU_FILE_PERMISSION_DENIED",
        5026 => "CU_FILE_DRIVER_ALREADY_OPEN",
        5027 => "CU_FILE_HANDLE_NOT_REGISTERED",
        5028 => "CU_FILE_HANDLE_ALREADY_REGISTERED",
        5029 => "CU_FILE_DEVICE_NOT_FOUND",
        5030 => "CU_FILE_INTERNAL_ERROR",
        5031 => "CU_FILE_GETNEWFD_FAILED",
        5033 => "CU_FILE_NVFS_SETUP_ERROR",
        5034 => "CU_FILE_IO_DISABLED",
        5035 => "CU_FILE_BATCH_SUBMIT_FAILED",
        5036 => "CU_FILE_GPU_MEMORY_PINNING_FAILED",
        5037 => "CU_FILE_BATCH_FULL",
        5038 => "CU_FILE_ASYNC_NOT_SUPPORTED",
        5043 => "CU_FILE_NOMEM_ERROR",
        5044 => "CU_FILE_IO_ERROR",
        5045 => "CU_FILE_INTERNAL_BUF_REGISTER_ERROR",
        5047 => "CU_FILE_INVALID_CONTEXT_ERROR",
        5048 => "CU_FILE_NVFS_INTERNAL_DRIVER_ERROR",
        _ => "CU_FILE_UNKNOWN_ERROR",
    }
}

fn check(status: RawStatus) -> Result<(), CuFileError> {
    if status.err == 0 {
        Ok(())
    } else {
        Err(CuFileError {
            code: status.err,
            cu_err: status.cu_err,
        })
    }
}

/// What `cuFileRead` returned when it did not return a byte count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadFailure {
    /// `-1`: a system error, errno given.
    Errno(i32),
    /// `-code`: a cuFile status.
    CuFile(u32),
}

impl fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadFailure::Errno(e) => {
                write!(f, "errno {e} ({})", std::io::Error::from_raw_os_error(*e))
            }
            ReadFailure::CuFile(code) => write!(f, "{} ({code})", error_name(*code)),
        }
    }
}

/// `cuFileRead`'s return value → bytes or the failure.
pub fn classify_read_return(ret: isize, errno: i32) -> Result<usize, ReadFailure> {
    match ret {
        n if n >= 0 => Ok(n as usize),
        -1 => Err(ReadFailure::Errno(errno)),
        n => Err(ReadFailure::CuFile(n.unsigned_abs() as u32)),
    }
}

/// `cuFileDriverGetProperties`, flattened for evidence and recordings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverProps {
    /// nvidia-fs version as cuFile sees it; 0.0 = nvidia-fs not in use.
    pub nvfs_major: u32,
    pub nvfs_minor: u32,
    pub poll_thresh_size_kb: u64,
    pub max_direct_io_size_kb: u64,
    /// Bit positions of `CUfileDriverStatusFlags` (filesystems/devices cuFile can serve directly).
    pub dstatusflags: u32,
    /// Bit positions of `CUfileDriverControlFlags` (poll mode = bit 0, compat mode allowed = bit 1).
    pub dcontrolflags: u32,
    pub fflags: u32,
    pub max_device_cache_size_kb: u32,
    pub per_buffer_cache_size_kb: u32,
    pub max_device_pinned_mem_size_kb: u32,
}

impl DriverProps {
    pub fn nvfs_in_use(&self) -> bool {
        self.nvfs_major != 0 || self.nvfs_minor != 0
    }
    pub fn compat_allowed(&self) -> bool {
        self.dcontrolflags & (1 << cf::CUfileDriverControlFlags::CU_FILE_ALLOW_COMPAT_MODE as u32)
            != 0
    }
    pub fn poll_mode(&self) -> bool {
        self.dcontrolflags & (1 << cf::CUfileDriverControlFlags::CU_FILE_USE_POLL_MODE as u32) != 0
    }
}

/// Which path reads took, from the level-3 statistics (summed over GPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathCounters {
    pub total_reads: u64,
    pub nvfs_reads: u64,
    pub p2p_reads: u64,
    pub posix_reads: u64,
    pub read_errors: u64,
    pub read_bytes: u64,
}

impl PathCounters {
    pub fn since(&self, before: &PathCounters) -> PathCounters {
        PathCounters {
            total_reads: self.total_reads.saturating_sub(before.total_reads),
            nvfs_reads: self.nvfs_reads.saturating_sub(before.nvfs_reads),
            p2p_reads: self.p2p_reads.saturating_sub(before.p2p_reads),
            posix_reads: self.posix_reads.saturating_sub(before.posix_reads),
            read_errors: self.read_errors.saturating_sub(before.read_errors),
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
        }
    }

    fn from_per_gpu(num_gpus: u32, per_gpu: &[cf::CUfilePerGpuStats_t]) -> Self {
        let n = (num_gpus as usize).min(per_gpu.len());
        per_gpu[..n]
            .iter()
            .fold(PathCounters::default(), |acc, g| PathCounters {
                total_reads: acc.total_reads + g.n_total_reads,
                nvfs_reads: acc.nvfs_reads + g.n_nvfs_reads,
                p2p_reads: acc.p2p_reads + g.n_p2p_reads,
                posix_reads: acc.posix_reads + g.n_posix_reads,
                read_errors: acc.read_errors + g.n_reads_err,
                read_bytes: acc.read_bytes + g.read_bytes,
            })
    }
}

/// `CUfileStatsLevel3_t` around a given level-1 block: the level-2 histograms, the GPU count and 16 per-GPU
/// blocks follow it, so a longer level 1 moves every per-GPU counter.
#[repr(C)]
struct Level3<L1> {
    level1: L1,
    read_size_kb_hist: [u64; 32],
    write_size_kb_hist: [u64; 32],
    num_gpus: u32,
    per_gpu_stats: [cf::CUfilePerGpuStats_t; 16],
}

/// `CUfileStatsLevel1_t` of cuFile 1.19 (CUDA 13.4): the 1.15 block, then vectored-I/O counters.
#[repr(C)]
struct Level1V119 {
    base: cf::CUfileStatsLevel1_t,
    readv_ops: cf::CUfileOpCounter_t,
    writev_ops: cf::CUfileOpCounter_t,
    /// `readv_bytes` … `writev_lat_sum_us`.
    vectored: [u64; 10],
}

/// The level-3 statistics layouts of `cufile.h`, as declared by each CUDA release's header (cudarc 0.19.10's
/// bindings of CUDA 12.0 to 13.4): none before cuFile 1.15 (CUDA 13.0, the H200's 1150); one layout for 1.15 to
/// 1.18 (CUDA 13.0 to 13.3); a longer level-1 block from 1.19 (CUDA 13.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsLayout {
    V115,
    V119,
}

/// Newest cuFile minor version whose statistics layout is known here (1.19 = 1190).
const NEWEST_KNOWN_STATS: i32 = 1190;

impl StatsLayout {
    /// The layout `cuFileGetVersion`'s answer (`1000 * major + 10 * minor`) fills. `Ok(None)` with the reason
    /// when no known layout applies (too old to have statistics, or a newer minor that may have grown them);
    /// `Err` for a major version this tool does not know at all.
    pub fn for_version(version: i32) -> Result<Result<StatsLayout, String>, String> {
        let (major, minor) = (version / 1000, version % 1000 / 10);
        if major > 1 {
            return Err(format!(
                "libcufile {major}.{minor} ({version}): major version {major} is unknown to this tool (it knows 1.x); refusing to call it"
            ));
        }
        Ok(match version {
            v if v < 1150 => Err(format!("cuFile {major}.{minor} declares no statistics API (1.15 and later do)")),
            v if v < 1190 => Ok(StatsLayout::V115),
            v if v <= NEWEST_KNOWN_STATS + 9 => Ok(StatsLayout::V119),
            _ => Err(format!(
                "cuFile {major}.{minor} is newer than the newest statistics layout known here (1.19): counters not read"
            )),
        })
    }
}

/// Room for the largest layout known, zeroed: whichever the library fills fits.
#[repr(C, align(8))]
struct StatsBuffer([u8; std::mem::size_of::<Level3<Level1V119>>()]);

/// Why the library could not be used at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No candidate loaded: `(name, dlerror)` per candidate.
    NotFound(Vec<(String, String)>),
    /// Loaded, but a required symbol is missing (a cuFile older than the calls used here).
    MissingSymbol { library: String, symbol: String },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound(tried) => {
                let names: Vec<&str> = tried.iter().map(|(n, _)| n.as_str()).collect();
                write!(f, "libcufile not found (tried {})", names.join(", "))
            }
            LoadError::MissingSymbol { library, symbol } => {
                write!(f, "{library} lacks {symbol}")
            }
        }
    }
}

type FnStatus0 = unsafe extern "C" fn() -> RawStatus;
type FnGetVersion = unsafe extern "C" fn(*mut c_int) -> RawStatus;
type FnGetProps = unsafe extern "C" fn(*mut cf::CUfileDrvProps_t) -> RawStatus;
type FnBufRegister = unsafe extern "C" fn(*const c_void, usize, c_int) -> RawStatus;
type FnBufDeregister = unsafe extern "C" fn(*const c_void) -> RawStatus;
type FnHandleRegister =
    unsafe extern "C" fn(*mut cf::CUfileHandle_t, *mut cf::CUfileDescr_t) -> RawStatus;
type FnHandleDeregister = unsafe extern "C" fn(cf::CUfileHandle_t);
type FnRead = unsafe extern "C" fn(cf::CUfileHandle_t, *mut c_void, usize, i64, i64) -> isize;
type FnSetStatsLevel = unsafe extern "C" fn(c_int) -> RawStatus;
type FnGetStatsL3 = unsafe extern "C" fn(*mut cf::CUfileStatsLevel3_t) -> RawStatus;

/// Optional: statistics (declared from cuFile 1.15); without them the path comes from nvidia-fs's counters alone.
struct StatsFns {
    set_level: FnSetStatsLevel,
    start: FnStatus0,
    reset: FnStatus0,
    get_l3: FnGetStatsL3,
}

pub struct CuFile {
    /// Which candidate loaded.
    pub library: String,
    get_version: FnGetVersion,
    driver_open: FnStatus0,
    driver_close: FnStatus0,
    get_props: FnGetProps,
    buf_register: FnBufRegister,
    buf_deregister: FnBufDeregister,
    handle_register: FnHandleRegister,
    handle_deregister: FnHandleDeregister,
    read: FnRead,
    stats: Option<StatsFns>,
    // Keeps the function pointers above valid; dropped last.
    _lib: Library,
}

/// A registered file handle.
pub struct FileHandle(cf::CUfileHandle_t);

impl CuFile {
    /// Points the cuFile log at `log_path`, then loads the first candidate that opens.
    pub fn load(log_path: Option<&Path>) -> Result<CuFile, LoadError> {
        if let Some(p) = log_path {
            // Before dlopen: the library reads it when it initialises.
            std::env::set_var(LOGFILE_ENV, p);
        }
        let mut tried = Vec::new();
        for name in LIB_CANDIDATES {
            breadcrumb(&format!("dlopen({name})"));
            // SAFETY: loading runs libcufile's initialisers; that is the library we mean to call.
            match unsafe { Library::new(name) } {
                Ok(lib) => return Self::resolve(name, lib),
                Err(e) => tried.push((name.to_string(), crate::dynlib::innermost_message(&e))),
            }
        }
        Err(LoadError::NotFound(tried))
    }

    fn resolve(name: &str, lib: Library) -> Result<CuFile, LoadError> {
        fn sym<T: Copy>(lib: &Library, library: &str, symbol: &str) -> Result<T, LoadError> {
            // SAFETY: each type alias above is the prototype of the symbol it is used with (cufile.h, 1.15).
            unsafe { lib.get::<T>(symbol.as_bytes()) }
                .map(|s| *s)
                .map_err(|_| LoadError::MissingSymbol {
                    library: library.to_string(),
                    symbol: symbol.to_string(),
                })
        }
        let stats = (|| {
            Some(StatsFns {
                set_level: sym(&lib, name, "cuFileSetStatsLevel").ok()?,
                start: sym(&lib, name, "cuFileStatsStart").ok()?,
                reset: sym(&lib, name, "cuFileStatsReset").ok()?,
                get_l3: sym(&lib, name, "cuFileGetStatsL3").ok()?,
            })
        })();
        Ok(CuFile {
            library: name.to_string(),
            get_version: sym(&lib, name, "cuFileGetVersion")?,
            driver_open: sym(&lib, name, "cuFileDriverOpen")?,
            driver_close: sym(&lib, name, "cuFileDriverClose")?,
            get_props: sym(&lib, name, "cuFileDriverGetProperties")?,
            buf_register: sym(&lib, name, "cuFileBufRegister")?,
            buf_deregister: sym(&lib, name, "cuFileBufDeregister")?,
            handle_register: sym(&lib, name, "cuFileHandleRegister")?,
            handle_deregister: sym(&lib, name, "cuFileHandleDeregister")?,
            read: sym(&lib, name, "cuFileRead")?,
            stats,
            _lib: lib,
        })
    }

    /// `1150` for cuFile 1.15.
    pub fn version(&self) -> Result<i32, CuFileError> {
        breadcrumb("cuFileGetVersion");
        let mut v: c_int = 0;
        // SAFETY: out-pointer to a live local.
        check(unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    /// Opens the driver for the lifetime of the returned guard, which closes it on drop. Declare the guard
    /// after the CUDA context and buffers it uses: cuFile must be closed before the context goes away (a
    /// primary context released under an open cuFile driver crashes in cuDevicePrimaryCtxRelease).
    pub fn open_driver(&self) -> Result<OpenDriver<'_>, CuFileError> {
        self.driver_open()?;
        Ok(OpenDriver { lib: self })
    }

    fn driver_open(&self) -> Result<(), CuFileError> {
        breadcrumb("cuFileDriverOpen");
        // SAFETY: no arguments.
        check(unsafe { (self.driver_open)() })
    }

    fn driver_close(&self) -> Result<(), CuFileError> {
        breadcrumb("cuFileDriverClose");
        // SAFETY: no arguments.
        check(unsafe { (self.driver_close)() })
    }

    pub fn driver_properties(&self) -> Result<DriverProps, CuFileError> {
        breadcrumb("cuFileDriverGetProperties");
        let mut p = MaybeUninit::<cf::CUfileDrvProps_t>::zeroed();
        // SAFETY: out-pointer to a zeroed struct of the header's layout (integers only).
        check(unsafe { (self.get_props)(p.as_mut_ptr()) })?;
        // SAFETY: zero-initialised integers, filled in by the library.
        let p = unsafe { p.assume_init() };
        Ok(DriverProps {
            nvfs_major: p.nvfs.major_version,
            nvfs_minor: p.nvfs.minor_version,
            poll_thresh_size_kb: p.nvfs.poll_thresh_size as u64,
            max_direct_io_size_kb: p.nvfs.max_direct_io_size as u64,
            dstatusflags: p.nvfs.dstatusflags,
            dcontrolflags: p.nvfs.dcontrolflags,
            fflags: p.fflags,
            max_device_cache_size_kb: p.max_device_cache_size,
            per_buffer_cache_size_kb: p.per_buffer_cache_size,
            max_device_pinned_mem_size_kb: p.max_device_pinned_mem_size,
        })
    }

    /// Registers `len` bytes of GPU memory at `dev_ptr` (pins it through BAR1 where nvidia-fs is used).
    pub fn buf_register(&self, dev_ptr: u64, len: usize) -> Result<(), CuFileError> {
        breadcrumb("cuFileBufRegister");
        // SAFETY: the caller passes a device allocation of at least `len` bytes that outlives the registration.
        check(unsafe { (self.buf_register)(dev_ptr as *const c_void, len, 0) })
    }

    pub fn buf_deregister(&self, dev_ptr: u64) -> Result<(), CuFileError> {
        breadcrumb("cuFileBufDeregister");
        // SAFETY: a pointer earlier registered with buf_register.
        check(unsafe { (self.buf_deregister)(dev_ptr as *const c_void) })
    }

    /// Registers an open file descriptor (opened with O_DIRECT for the direct paths).
    pub fn handle_register(&self, fd: i32) -> Result<FileHandle, CuFileError> {
        breadcrumb("cuFileHandleRegister");
        let mut descr = MaybeUninit::<cf::CUfileDescr_t>::zeroed();
        // SAFETY: filling a zeroed descriptor; the union member for an OPAQUE_FD handle is `fd`.
        unsafe {
            let d = descr.as_mut_ptr();
            (*d).type_ = cf::CUfileFileHandleType::CU_FILE_HANDLE_TYPE_OPAQUE_FD;
            (*d).handle.fd = fd;
        }
        let mut handle: cf::CUfileHandle_t = std::ptr::null_mut();
        // SAFETY: valid descriptor and out-pointer; `fd` stays open until handle_deregister.
        check(unsafe { (self.handle_register)(&mut handle, descr.as_mut_ptr()) })?;
        Ok(FileHandle(handle))
    }

    pub fn handle_deregister(&self, handle: FileHandle) {
        breadcrumb("cuFileHandleDeregister");
        // SAFETY: a handle returned by handle_register, deregistered once (moved in).
        unsafe { (self.handle_deregister)(handle.0) }
    }

    /// Reads `size` bytes at `file_offset` into the registered buffer `dev_ptr` + `dev_offset`.
    pub fn read(
        &self,
        handle: &FileHandle,
        dev_ptr: u64,
        size: usize,
        file_offset: u64,
        dev_offset: u64,
    ) -> Result<usize, ReadFailure> {
        breadcrumb("cuFileRead");
        // SAFETY: registered handle and buffer; the caller keeps dev_offset + size within the buffer.
        let ret = unsafe {
            (self.read)(
                handle.0,
                dev_ptr as *mut c_void,
                size,
                file_offset as i64,
                dev_offset as i64,
            )
        };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        classify_read_return(ret, errno)
    }

    /// Turns on level-3 statistics and zeroes them. `None` when this cuFile has no statistics API.
    pub fn start_stats(&self) -> Option<Result<(), CuFileError>> {
        let s = self.stats.as_ref()?;
        breadcrumb("cuFileSetStatsLevel(3)");
        Some((|| {
            // SAFETY: plain calls with an integer or no argument.
            check(unsafe { (s.set_level)(3) })?;
            breadcrumb("cuFileStatsStart");
            check(unsafe { (s.start)() })?;
            breadcrumb("cuFileStatsReset");
            check(unsafe { (s.reset)() })
        })())
    }

    /// The level-3 counters, read with `layout` (from [`StatsLayout::for_version`]).
    pub fn path_counters(&self, layout: StatsLayout) -> Option<Result<PathCounters, CuFileError>> {
        let s = self.stats.as_ref()?;
        breadcrumb("cuFileGetStatsL3");
        // A few KiB of integers, zeroed on the heap, sized for the largest layout known.
        let mut buf = Box::new(StatsBuffer([0; std::mem::size_of::<StatsBuffer>()]));
        // SAFETY: out-pointer to a zeroed, 8-aligned buffer at least as large as the layout this version fills.
        let r = check(unsafe { (s.get_l3)(buf.0.as_mut_ptr().cast()) });
        Some(r.map(|()| counters_from(&buf, layout)))
    }
}

/// Reads the per-GPU block of `layout` out of a filled buffer, and nothing past it.
fn counters_from(buf: &StatsBuffer, layout: StatsLayout) -> PathCounters {
    fn view<L1>(buf: &StatsBuffer) -> PathCounters {
        const { assert!(std::mem::size_of::<Level3<L1>>() <= std::mem::size_of::<StatsBuffer>()) };
        // SAFETY: the buffer is 8-aligned, large enough (checked above) and holds only integers, for which every
        // bit pattern is valid.
        let stats = unsafe { &*buf.0.as_ptr().cast::<Level3<L1>>() };
        PathCounters::from_per_gpu(stats.num_gpus, &stats.per_gpu_stats)
    }
    match layout {
        StatsLayout::V115 => view::<cf::CUfileStatsLevel1_t>(buf),
        StatsLayout::V119 => view::<Level1V119>(buf),
    }
}

/// An open cuFile driver; closed on drop (every return path, early ones included).
pub struct OpenDriver<'a> {
    lib: &'a CuFile,
}

impl Drop for OpenDriver<'_> {
    fn drop(&mut self) {
        let _ = self.lib.driver_close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn stats_layouts_match_cufile_h() {
        // 1.15: the generic view is exactly cudarc's binding of CUDA 13.0's cufile.h.
        assert_eq!(
            size_of::<Level3<cf::CUfileStatsLevel1_t>>(),
            size_of::<cf::CUfileStatsLevel3_t>()
        );
        assert_eq!(
            offset_of!(Level3<cf::CUfileStatsLevel1_t>, per_gpu_stats),
            offset_of!(cf::CUfileStatsLevel3_t, per_gpu_stats)
        );
        // 1.19 (CUDA 13.4): two op counters and ten u64 more in level 1 move every per-GPU counter by 112 bytes.
        assert_eq!(
            offset_of!(Level3<Level1V119>, per_gpu_stats)
                - offset_of!(Level3<cf::CUfileStatsLevel1_t>, per_gpu_stats),
            112
        );
        assert_eq!(size_of::<StatsBuffer>(), size_of::<Level3<Level1V119>>());
    }

    #[test]
    fn stats_layout_follows_the_version_and_refuses_an_unknown_major() {
        assert_eq!(StatsLayout::for_version(1150), Ok(Ok(StatsLayout::V115)));
        assert_eq!(StatsLayout::for_version(1180), Ok(Ok(StatsLayout::V115)));
        assert_eq!(StatsLayout::for_version(1190), Ok(Ok(StatsLayout::V119)));
        assert!(StatsLayout::for_version(1140)
            .unwrap()
            .unwrap_err()
            .contains("no statistics API"));
        assert!(StatsLayout::for_version(1200)
            .unwrap()
            .unwrap_err()
            .contains("newer than"));
        assert!(StatsLayout::for_version(2010)
            .unwrap_err()
            .contains("major version 2"));
    }

    /// What a cuFile 1.19 library writes is read at 1.19's offsets; the 1.15 view would see other fields.
    #[test]
    fn counters_are_read_at_the_offsets_of_the_version() {
        let mut buf = Box::new(StatsBuffer([0; size_of::<StatsBuffer>()]));
        let base = offset_of!(Level3<Level1V119>, per_gpu_stats);
        let field = |name_offset: usize| base + name_offset;
        let put = |buf: &mut StatsBuffer, at: usize, v: u64| {
            buf.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        };
        buf.0[offset_of!(Level3<Level1V119>, num_gpus)..][..4].copy_from_slice(&1u32.to_ne_bytes());
        put(
            &mut buf,
            field(offset_of!(cf::CUfilePerGpuStats_t, n_total_reads)),
            16,
        );
        put(
            &mut buf,
            field(offset_of!(cf::CUfilePerGpuStats_t, n_posix_reads)),
            16,
        );
        put(
            &mut buf,
            field(offset_of!(cf::CUfilePerGpuStats_t, n_reads_err)),
            2,
        );
        let c = counters_from(&buf, StatsLayout::V119);
        assert_eq!((c.total_reads, c.posix_reads, c.read_errors), (16, 16, 2));
        assert_ne!(counters_from(&buf, StatsLayout::V115), c);
    }

    #[test]
    fn read_return_values_classify() {
        assert_eq!(classify_read_return(4096, 0), Ok(4096));
        assert_eq!(classify_read_return(-1, 22), Err(ReadFailure::Errno(22)));
        assert_eq!(
            classify_read_return(-5027, 0),
            Err(ReadFailure::CuFile(HANDLE_NOT_REGISTERED))
        );
    }

    #[test]
    fn error_names_and_display() {
        let e = CuFileError {
            code: 5027,
            cu_err: 0,
        };
        assert_eq!(e.to_string(), "CU_FILE_HANDLE_NOT_REGISTERED (5027)");
        assert_eq!(error_name(4242), "CU_FILE_UNKNOWN_ERROR");
    }

    #[test]
    fn props_flags_decode() {
        let p = DriverProps {
            nvfs_major: 0,
            nvfs_minor: 0,
            poll_thresh_size_kb: 4,
            max_direct_io_size_kb: 16384,
            dstatusflags: 0,
            dcontrolflags: 0b10,
            fflags: 0,
            max_device_cache_size_kb: 131072,
            per_buffer_cache_size_kb: 1024,
            max_device_pinned_mem_size_kb: 33554432,
        };
        assert!(p.compat_allowed());
        assert!(!p.poll_mode());
        assert!(!p.nvfs_in_use());
    }

    #[test]
    fn counters_delta_saturates() {
        let before = PathCounters {
            total_reads: 5,
            posix_reads: 5,
            ..Default::default()
        };
        let after = PathCounters {
            total_reads: 21,
            posix_reads: 21,
            read_bytes: 1 << 30,
            ..Default::default()
        };
        let d = after.since(&before);
        assert_eq!((d.total_reads, d.posix_reads, d.nvfs_reads), (16, 16, 0));
        assert_eq!(before.since(&after).total_reads, 0);
    }

    #[test]
    fn missing_library_is_an_error_not_a_panic() {
        // The build machine has no libcufile; a node with it loads it instead. Either way: no panic.
        match CuFile::load(None) {
            Ok(c) => assert!(LIB_CANDIDATES.contains(&c.library.as_str())),
            Err(LoadError::NotFound(tried)) => assert_eq!(tried.len(), 2),
            Err(e) => panic!("unexpected: {e}"),
        }
    }
}
