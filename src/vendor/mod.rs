//! Vendor libraries opened at run time (dlopen): nothing here is linked, so the binary starts on a host without
//! them. Each module turns library answers into plain Rust values or `Err(String)` with the call that failed;
//! no verdicts here.

pub mod copy;
pub mod cuda;
pub mod cuda_dmabuf;
pub mod cufile;
pub mod nvml;
pub mod rdma_loopback;
pub mod verbs;

/// The innermost cause of an error: libloading says "dlopen failed" and keeps the loader's own text
/// (`libnvidia-ml.so.1: cannot open shared object file: No such file or directory`) in `source()`.
pub fn innermost_message(e: &dyn std::error::Error) -> String {
    let mut current = e;
    while let Some(cause) = current.source() {
        current = cause;
    }
    current.to_string()
}
