//! Vendor libraries opened at run time (dlopen): nothing here is linked, so the binary starts on a host without
//! them. Each module turns library answers into plain Rust values or `Err(String)` with the call that failed;
//! no verdicts here.

pub mod cuda;
pub mod cuda_dmabuf;
pub mod cufile;
pub mod verbs;
