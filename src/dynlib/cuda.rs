//! The CUDA driver API (`libcuda.so.1`) through cudarc's dynamically loaded bindings.
//!
//! cudarc panics when the library or one of its symbols is missing, so [`load`] checks both first and every
//! other function here returns `Err` until `load` has succeeded. Errors name the call: `cuMemAlloc_v2:
//! CUDA_ERROR_OUT_OF_MEMORY (out of memory)`. Each call leaves an [`child::breadcrumb`](crate::child::breadcrumb) so a hang inside the
//! driver is reported with the call's name.
//!
//! Lifetimes follow the driver's rules: a [`DeviceContext`] makes the GPU's primary context current on the
//! calling thread; buffers, streams and events belong to the context that was current when they were created
//! and must be dropped before it.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;

use super::LibError;
use crate::child::breadcrumb;
use crate::model::Library;

pub type CudaResult<T> = Result<T, LibError>;

/// Driver entry points this module calls. Checked at load so an old driver is an error, not a cudarc panic.
/// Every one exists since CUDA 11 (R450); see [`EVENT_ELAPSED`] for the one that changed since.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceGetPCIBusId",
    "cuDeviceTotalMem_v2",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxEnablePeerAccess",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyPeerAsync",
    "cuMemsetD32_v2",
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// `cuEventElapsedTime_v2` arrived with CUDA 12.8 (R570); drivers from R535 (CUDA 12.2) export only the first
/// version, same prototype. The newest one the driver has is used. cudarc built for CUDA 13 binds only `_v2`,
/// so the pointer is resolved here.
const EVENT_ELAPSED: [&str; 2] = ["cuEventElapsedTime_v2", "cuEventElapsedTime"];

type EventElapsedFn = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;

/// The library handle the loader checked, kept open so the pointers resolved from it stay valid.
struct Resolved {
    _lib: libloading::Library,
    event_elapsed: (EventElapsedFn, &'static str),
}

static RESOLVED: OnceLock<Resolved> = OnceLock::new();

static LOADED: OnceLock<CudaResult<()>> = OnceLock::new();

/// Opens libcuda and runs `cuInit(0)`. Never panics; the error is the loader's own message (`libcuda.so.1:
/// cannot open shared object file: No such file or directory`) or the failing call. Cached per process.
pub fn load() -> CudaResult<()> {
    LOADED.get_or_init(load_uncached).clone()
}

fn load_uncached() -> CudaResult<()> {
    breadcrumb("dlopen(libcuda)");
    let candidates = cudarc::get_lib_name_candidates("cuda");
    // cudarc opens the first candidate that loads; check that same file for every symbol we call.
    let mut first_error = None;
    let mut opened = None;
    for name in &candidates {
        // SAFETY: loading libcuda runs its initialisers, which is what using it requires anyway.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => {
                opened = Some((name.clone(), lib));
                break;
            }
            Err(e) => {
                if name == "libcuda.so.1" || first_error.is_none() {
                    first_error = Some(super::innermost_message(&e));
                }
            }
        }
    }
    let Some((name, lib)) = opened else {
        return Err(LibError::not_loaded(
            Library::Cuda,
            first_error.unwrap_or_else(|| "libcuda.so.1: not found".into()),
        ));
    };
    let missing: Vec<&str> = REQUIRED_SYMBOLS
        .iter()
        .copied()
        // SAFETY: only the symbol's presence is checked; it is never called through this handle.
        .filter(|sym| unsafe { lib.get::<*const c_void>(sym.as_bytes()) }.is_err())
        .collect();
    let event_elapsed = newest_event_elapsed(&lib);
    let mut missing: Vec<String> = missing.into_iter().map(str::to_string).collect();
    if event_elapsed.is_none() {
        missing.push(EVENT_ELAPSED.join(" or "));
    }
    if !missing.is_empty() {
        let missing = missing.join(", ");
        return Err(LibError::missing_symbol(
            Library::Cuda,
            &missing,
            format!("{name} lacks {missing} (driver too old for this tool)"),
        ));
    }
    if let Some(event_elapsed) = event_elapsed {
        let _ = RESOLVED.set(Resolved {
            _lib: lib,
            event_elapsed,
        });
    }
    // SAFETY: presence checked above, so cudarc's loader will not panic.
    if !unsafe { sys::is_culib_present() } {
        return Err(LibError::not_loaded(
            Library::Cuda,
            format!("{name} opened but cudarc could not load it"),
        ));
    }
    breadcrumb("cuInit");
    result::init().map_err(|e| call_error("cuInit", e))
}

/// The newest `cuEventElapsedTime` the driver exports, and its name.
fn newest_event_elapsed(lib: &libloading::Library) -> Option<(EventElapsedFn, &'static str)> {
    EVENT_ELAPSED.iter().find_map(|name| {
        // SAFETY: EventElapsedFn is the prototype both versions share (cuda.h).
        unsafe { lib.get::<EventElapsedFn>(name.as_bytes()) }
            .ok()
            .map(|f| (*f, *name))
    })
}

/// The call, the `CUresult` and `cuGetErrorName (cuGetErrorString)`.
fn call_error(call: &str, e: DriverError) -> LibError {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let words = if text.is_empty() {
        name
    } else {
        format!("{name} ({text})")
    };
    LibError::failed(Library::Cuda, call, Some(e.0 as i64), words)
}

fn check(call: &str, status: sys::CUresult) -> CudaResult<()> {
    status.result().map_err(|e| call_error(call, e))
}

fn loaded() -> CudaResult<()> {
    match LOADED.get() {
        Some(r) => r.clone(),
        None => Err(LibError::failed(
            Library::Cuda,
            "cuda::load",
            None,
            "not called before this call",
        )),
    }
}

/// `cuDriverGetVersion`: 13000 for CUDA 13.0.
pub fn driver_version() -> CudaResult<i32> {
    loaded()?;
    let mut v = 0;
    breadcrumb("cuDriverGetVersion");
    // SAFETY: writes one int.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    Ok(v)
}

pub fn device_count() -> CudaResult<usize> {
    loaded()?;
    breadcrumb("cuDeviceGetCount");
    result::device::get_count()
        .map(|n| n.max(0) as usize)
        .map_err(|e| call_error("cuDeviceGetCount", e))
}

/// A GPU by CUDA ordinal (CUDA order, which need not be NVML's: match on the PCI bus id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub ordinal: usize,
    handle: sys::CUdevice,
}

impl Device {
    pub fn get(ordinal: usize) -> CudaResult<Device> {
        loaded()?;
        breadcrumb("cuDeviceGet");
        let handle =
            result::device::get(ordinal as i32).map_err(|e| call_error("cuDeviceGet", e))?;
        Ok(Device { ordinal, handle })
    }

    pub fn name(&self) -> CudaResult<String> {
        breadcrumb("cuDeviceGetName");
        result::device::get_name(self.handle).map_err(|e| call_error("cuDeviceGetName", e))
    }

    /// Lower-case `0000:00:06.0`, the form sysfs and NVML use (the driver returns upper case).
    pub fn pci_bus_id(&self) -> CudaResult<String> {
        let mut buf = [0 as std::ffi::c_char; 32];
        breadcrumb("cuDeviceGetPCIBusId");
        // SAFETY: the driver writes a NUL-terminated string of at most `len` bytes.
        check("cuDeviceGetPCIBusId", unsafe {
            sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, self.handle)
        })?;
        // SAFETY: NUL-terminated above; the buffer is zeroed so a short write is still terminated.
        let id = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Ok(id.to_string_lossy().to_lowercase())
    }

    /// `cuDeviceCanAccessPeer`: whether this GPU can map `peer`'s memory.
    pub fn can_access_peer(&self, peer: &Device) -> CudaResult<bool> {
        let mut can = 0;
        breadcrumb("cuDeviceCanAccessPeer");
        // SAFETY: writes one int; both handles came from cuDeviceGet.
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.handle, peer.handle)
        })?;
        Ok(can != 0)
    }
}

/// The GPU's primary context, retained and made current on the calling thread; released on drop.
pub struct DeviceContext {
    device: Device,
    ctx: sys::CUcontext,
}

impl DeviceContext {
    pub fn new(ordinal: usize) -> CudaResult<DeviceContext> {
        let device = Device::get(ordinal)?;
        breadcrumb("cuDevicePrimaryCtxRetain");
        // SAFETY: handle came from cuDeviceGet.
        let ctx = unsafe { result::primary_ctx::retain(device.handle) }
            .map_err(|e| call_error("cuDevicePrimaryCtxRetain", e))?;
        let context = DeviceContext { device, ctx };
        context.make_current()?;
        Ok(context)
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Makes this context current on the calling thread (needed again after switching GPUs).
    pub fn make_current(&self) -> CudaResult<()> {
        breadcrumb("cuCtxSetCurrent");
        // SAFETY: ctx is a retained primary context, alive until drop.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(|e| call_error("cuCtxSetCurrent", e))
    }

    /// `cuCtxEnablePeerAccess` from this (current) context to `peer`; already enabled counts as success.
    pub fn enable_peer_access(&self, peer: &DeviceContext) -> CudaResult<()> {
        self.make_current()?;
        breadcrumb("cuCtxEnablePeerAccess");
        // SAFETY: both contexts are alive.
        let status = unsafe { sys::cuCtxEnablePeerAccess(peer.ctx, 0) };
        if status == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        check("cuCtxEnablePeerAccess", status)
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        breadcrumb("cuDevicePrimaryCtxRelease_v2");
        // SAFETY: releases the reference taken in new(); errors at teardown change nothing for the caller.
        let _ = unsafe { result::primary_ctx::release(self.device.handle) };
    }
}

/// GPU memory from `cuMemAlloc` in the context current at allocation; freed on drop.
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceBuffer {
    /// Needs a current context ([`DeviceContext::new`] or [`DeviceContext::make_current`]).
    pub fn alloc(bytes: usize) -> CudaResult<DeviceBuffer> {
        loaded()?;
        breadcrumb("cuMemAlloc_v2");
        // SAFETY: plain allocation; the contents are never read before being written.
        let ptr = unsafe { result::malloc_sync(bytes) }
            .map_err(|e| call_error(&format!("cuMemAlloc_v2({bytes} bytes)"), e))?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Fills the buffer with a 32-bit pattern (`cuMemsetD32`); the length is rounded down to whole words.
    pub fn fill_u32(&self, value: u32) -> CudaResult<()> {
        breadcrumb("cuMemsetD32_v2");
        // SAFETY: ptr is a live allocation of `bytes` bytes.
        check("cuMemsetD32_v2", unsafe {
            sys::cuMemsetD32_v2(self.ptr, value, self.bytes / 4)
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        breadcrumb("cuMemFree_v2");
        // SAFETY: allocated by cuMemAlloc and freed once; pending copies were synchronised by their owner.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// How a pinned buffer was obtained, so drop undoes exactly that.
enum Pinning {
    /// `cuMemHostAlloc`: the driver's own allocation.
    HostAlloc,
    /// `mmap` + `cuMemHostRegister`: pages placed by the caller (first touch on a chosen NUMA node).
    Registered,
}

/// Page-locked host memory the GPU can DMA to and from; freed (or unregistered and unmapped) on drop.
pub struct PinnedHostBuffer {
    ptr: *mut u8,
    bytes: usize,
    pinning: Pinning,
}

// SAFETY: the buffer is plain memory owned by this value; the driver handle needs no thread affinity.
unsafe impl Send for PinnedHostBuffer {}

impl PinnedHostBuffer {
    /// `cuMemHostAlloc(PORTABLE)`: pinned for every context. Needs a current context.
    pub fn alloc(bytes: usize) -> CudaResult<PinnedHostBuffer> {
        loaded()?;
        breadcrumb("cuMemHostAlloc");
        // SAFETY: plain allocation, zero-filled below before any read.
        let ptr = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(|e| call_error(&format!("cuMemHostAlloc({bytes} bytes)"), e))?;
        let buf = PinnedHostBuffer {
            ptr: ptr.cast(),
            bytes,
            pinning: Pinning::HostAlloc,
        };
        Ok(buf)
    }

    /// Anonymous memory touched by the calling thread, then registered with `cuMemHostRegister(PORTABLE)`.
    /// Pin the thread to a NUMA node's CPUs first and the pages land on that node (first-touch policy).
    pub fn alloc_first_touch(bytes: usize) -> CudaResult<PinnedHostBuffer> {
        loaded()?;
        // SAFETY: fresh private anonymous mapping; checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let os = std::io::Error::last_os_error();
            return Err(LibError::failed(
                Library::Cuda,
                format!("mmap({bytes} bytes)"),
                os.raw_os_error().map(i64::from),
                os.to_string(),
            ));
        }
        // Transparent huge pages where the kernel allows: fewer, larger DMA segments for the copy engine.
        // Advisory; a kernel without THP ignores it.
        // SAFETY: advice on the mapping just created.
        unsafe { libc::madvise(ptr, bytes.max(1), libc::MADV_HUGEPAGE) };
        // First touch: writing every page here places it on this thread's NUMA node.
        // SAFETY: the mapping is `bytes` long and writable.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        breadcrumb("cuMemHostRegister_v2");
        // SAFETY: registers the mapping just created; unregistered before munmap in drop.
        let status =
            unsafe { sys::cuMemHostRegister_v2(ptr, bytes, sys::CU_MEMHOSTREGISTER_PORTABLE) };
        if let Err(e) = check(&format!("cuMemHostRegister_v2({bytes} bytes)"), status) {
            // SAFETY: unmapping the mapping created above, which nothing else references.
            unsafe { libc::munmap(ptr, bytes.max(1)) };
            return Err(e);
        }
        Ok(PinnedHostBuffer {
            ptr: ptr.cast(),
            bytes,
            pinning: Pinning::Registered,
        })
    }

    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for `bytes` bytes for the life of self; no copy writes into it while borrowed
        // because async copies take `&mut self` for the destination and the caller synchronises.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, with exclusive access through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

impl Drop for PinnedHostBuffer {
    fn drop(&mut self) {
        match self.pinning {
            Pinning::HostAlloc => {
                breadcrumb("cuMemFreeHost");
                // SAFETY: allocated by cuMemHostAlloc, freed once.
                let _ = unsafe { result::free_host(self.ptr.cast()) };
            }
            Pinning::Registered => {
                breadcrumb("cuMemHostUnregister");
                // SAFETY: registered in alloc_first_touch; then the mapping is removed once.
                unsafe {
                    let _ = sys::cuMemHostUnregister(self.ptr.cast());
                    libc::munmap(self.ptr.cast(), self.bytes.max(1));
                }
            }
        }
    }
}

fn same_len(a: usize, b: usize, what: &str) -> CudaResult<()> {
    if a == b {
        Ok(())
    } else {
        Err(LibError::failed(
            Library::Cuda,
            what,
            None,
            format!("buffer sizes differ ({a} vs {b} bytes)"),
        ))
    }
}

/// Synchronous host→device copy of the whole buffer.
pub fn copy_htod(dst: &DeviceBuffer, src: &PinnedHostBuffer) -> CudaResult<()> {
    same_len(dst.len(), src.len(), "cuMemcpyHtoD_v2")?;
    breadcrumb("cuMemcpyHtoD_v2");
    // SAFETY: both buffers are live and `len` bytes long.
    unsafe { result::memcpy_htod_sync(dst.ptr, src.as_slice()) }
        .map_err(|e| call_error("cuMemcpyHtoD_v2", e))
}

/// Synchronous device→host copy of the whole buffer.
pub fn copy_dtoh(dst: &mut PinnedHostBuffer, src: &DeviceBuffer) -> CudaResult<()> {
    same_len(dst.len(), src.len(), "cuMemcpyDtoH_v2")?;
    breadcrumb("cuMemcpyDtoH_v2");
    // SAFETY: both buffers are live and `len` bytes long.
    unsafe { result::memcpy_dtoh_sync(dst.as_mut_slice(), src.ptr) }
        .map_err(|e| call_error("cuMemcpyDtoH_v2", e))
}

/// A non-blocking stream in the context current at creation; destroyed on drop.
pub struct Stream {
    raw: sys::CUstream,
}

impl Stream {
    pub fn new() -> CudaResult<Stream> {
        loaded()?;
        breadcrumb("cuStreamCreate");
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| call_error("cuStreamCreate", e))?;
        Ok(Stream { raw })
    }

    /// Queues a host→device copy (copy engine). The buffers must outlive the copy: synchronise before
    /// dropping or reusing them.
    pub fn copy_htod(&self, dst: &DeviceBuffer, src: &PinnedHostBuffer) -> CudaResult<()> {
        same_len(dst.len(), src.len(), "cuMemcpyHtoDAsync_v2")?;
        breadcrumb("cuMemcpyHtoDAsync_v2");
        // SAFETY: live buffers of equal length; the caller synchronises before touching them.
        unsafe { result::memcpy_htod_async(dst.ptr, src.as_slice(), self.raw) }
            .map_err(|e| call_error("cuMemcpyHtoDAsync_v2", e))
    }

    /// Queues a device→host copy (copy engine).
    pub fn copy_dtoh(&self, dst: &mut PinnedHostBuffer, src: &DeviceBuffer) -> CudaResult<()> {
        same_len(dst.len(), src.len(), "cuMemcpyDtoHAsync_v2")?;
        breadcrumb("cuMemcpyDtoHAsync_v2");
        // SAFETY: live buffers of equal length; the caller synchronises before reading dst.
        unsafe { result::memcpy_dtoh_async(dst.as_mut_slice(), src.ptr, self.raw) }
            .map_err(|e| call_error("cuMemcpyDtoHAsync_v2", e))
    }

    /// Queues a device→device copy between two GPUs' contexts (`cuMemcpyPeerAsync`; over NVLink or PCIe P2P
    /// when peer access is enabled, staged through the host otherwise).
    pub fn copy_peer(
        &self,
        dst: &DeviceBuffer,
        dst_ctx: &DeviceContext,
        src: &DeviceBuffer,
        src_ctx: &DeviceContext,
    ) -> CudaResult<()> {
        same_len(dst.len(), src.len(), "cuMemcpyPeerAsync")?;
        breadcrumb("cuMemcpyPeerAsync");
        // SAFETY: live buffers of equal length in live contexts.
        unsafe {
            result::memcpy_peer_async(
                dst_ctx.ctx,
                dst.ptr,
                src_ctx.ctx,
                src.ptr,
                src.len(),
                self.raw,
            )
        }
        .map_err(|e| call_error("cuMemcpyPeerAsync", e))
    }

    pub fn synchronize(&self) -> CudaResult<()> {
        breadcrumb("cuStreamSynchronize");
        // SAFETY: stream is alive.
        unsafe { result::stream::synchronize(self.raw) }
            .map_err(|e| call_error("cuStreamSynchronize", e))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        breadcrumb("cuStreamDestroy_v2");
        // SAFETY: destroyed once; the driver lets queued work finish first.
        let _ = unsafe { result::stream::destroy(self.raw) };
    }
}

/// A timing event; destroyed on drop.
pub struct Event {
    raw: sys::CUevent,
}

impl Event {
    pub fn new() -> CudaResult<Event> {
        loaded()?;
        breadcrumb("cuEventCreate");
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| call_error("cuEventCreate", e))?;
        Ok(Event { raw })
    }

    pub fn record(&self, stream: &Stream) -> CudaResult<()> {
        breadcrumb("cuEventRecord");
        // SAFETY: event and stream are alive and belong to the same context.
        unsafe { result::event::record(self.raw, stream.raw) }
            .map_err(|e| call_error("cuEventRecord", e))
    }

    pub fn synchronize(&self) -> CudaResult<()> {
        breadcrumb("cuEventSynchronize");
        // SAFETY: event is alive.
        unsafe { result::event::synchronize(self.raw) }
            .map_err(|e| call_error("cuEventSynchronize", e))
    }

    /// Milliseconds from `start` to `self`, both recorded and completed (GPU clock, ~0.5 µs resolution).
    pub fn elapsed_ms_since(&self, start: &Event) -> CudaResult<f64> {
        loaded()?;
        let Some(Resolved {
            event_elapsed: (elapsed, name),
            ..
        }) = RESOLVED.get()
        else {
            return Err(LibError::failed(
                Library::Cuda,
                "cuda::load",
                None,
                "not called before this call",
            ));
        };
        breadcrumb(name);
        let mut ms: f32 = 0.0;
        // SAFETY: resolved from the loaded driver with its prototype; both events are alive and recorded.
        check(name, unsafe { elapsed(&mut ms, start.raw, self.raw) })?;
        Ok(f64::from(ms))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        breadcrumb("cuEventDestroy_v2");
        // SAFETY: destroyed once.
        let _ = unsafe { result::event::destroy(self.raw) };
    }
}

/// Times one queued operation on `stream` with a pair of events: returns milliseconds on the GPU clock.
pub fn time_on_stream(
    stream: &Stream,
    queue: impl FnOnce(&Stream) -> CudaResult<()>,
) -> CudaResult<f64> {
    let start = Event::new()?;
    let end = Event::new()?;
    start.record(stream)?;
    queue(stream)?;
    end.record(stream)?;
    end.synchronize()?;
    end.elapsed_ms_since(&start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_before_load_are_errors_not_panics() {
        // Whether or not this machine has libcuda, nothing here may panic.
        if LOADED.get().is_none() {
            assert_eq!(device_count().unwrap_err().call, "cuda::load");
        }
        let _ = load();
        let _ = device_count();
    }

    /// A driver of R535-R565 exports only the first `cuEventElapsedTime`: it is found and it times.
    #[test]
    fn event_timing_falls_back_to_the_entry_point_older_drivers_export() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("cuda.c");
        std::fs::write(
            &src,
            "int cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 2.5f; return 0; }\n",
        )
        .unwrap();
        let lib = dir.path().join("libcuda-r535.so");
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .expect("this test needs a C compiler (`cc`)");
        assert!(status.success());
        // SAFETY: a library built above with no initialisers.
        let lib = unsafe { libloading::Library::new(&lib) }.unwrap();
        let (elapsed, name) = newest_event_elapsed(&lib).expect("the older entry point");
        assert_eq!(name, "cuEventElapsedTime");
        let mut ms = 0.0;
        // SAFETY: the stub ignores the events and writes one float.
        let status = unsafe { elapsed(&mut ms, std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(ms, 2.5);
    }

    #[test]
    fn missing_driver_reports_the_loader_message() {
        let Err(e) = load() else {
            return; // a machine with a working driver
        };
        assert_eq!(e.library, Library::Cuda);
        assert!(
            e.is_not_loaded() || e.call == "cuInit",
            "error names the library or the call: {e}"
        );
    }
}
