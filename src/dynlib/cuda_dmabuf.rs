//! One CUDA call the GDR loopback needs beyond `cuda.rs`: a DMA-BUF file descriptor for a range of GPU memory
//! (`cuMemGetHandleForAddressRange`, CUDA 11.7+), which `ibv_reg_dmabuf_mr` registers without a peer-memory
//! module. Kept apart from `cuda.rs` so that file stays the GPU probes' own.

use std::ffi::c_void;

use cudarc::driver::sys;

use crate::child::breadcrumb;
use crate::dynlib::cuda::{self, CudaResult, DeviceBuffer};
use crate::dynlib::LibError;
use crate::model::Library;

const SYMBOL: &str = "cuMemGetHandleForAddressRange";

/// An exported DMA-BUF fd, closed on drop.
pub struct DmabufFd(i32);

impl DmabufFd {
    pub fn raw(&self) -> i32 {
        self.0
    }
}

impl Drop for DmabufFd {
    fn drop(&mut self) {
        // SAFETY: a descriptor this value owns, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Exports the whole of `buf` as a DMA-BUF. Err names the call and the driver's answer (older drivers lack
/// the symbol; the proprietary kernel module answers CUDA_ERROR_NOT_SUPPORTED).
pub fn export(buf: &DeviceBuffer) -> CudaResult<DmabufFd> {
    cuda::load()?;
    // cudarc panics on a missing symbol: look first, in the library the driver API was loaded from.
    // SAFETY: only the symbol's presence is checked.
    let present = unsafe { libloading::Library::new("libcuda.so.1") }
        .ok()
        .is_some_and(|lib| unsafe { lib.get::<*const c_void>(SYMBOL.as_bytes()) }.is_ok());
    if !present {
        return Err(LibError::missing_symbol(
            Library::Cuda,
            SYMBOL,
            format!("libcuda.so.1 lacks {SYMBOL} (driver older than CUDA 11.7)"),
        ));
    }
    breadcrumb(SYMBOL);
    let mut fd: i32 = -1;
    // SAFETY: out-pointer to a live int; the range is one whole cuMemAlloc allocation (page aligned).
    let status = unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut i32).cast(),
            buf.ptr(),
            buf.len(),
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS || fd < 0 {
        return Err(LibError::failed(
            Library::Cuda,
            SYMBOL,
            Some(status as i64),
            format!("{status:?}"),
        ));
    }
    Ok(DmabufFd(fd))
}
