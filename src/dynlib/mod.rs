//! Vendor libraries opened at run time (dlopen): nothing here is linked, so the binary starts on a host without
//! them. Each module turns library answers into plain Rust values or a typed [`LibError`] (library, call, code,
//! the library's words); no verdicts here.

pub mod cuda;
pub mod cuda_dmabuf;
pub mod cufile;
pub mod efa;
pub mod error;
pub mod fabric;
pub mod nvml;
pub mod verbs;

pub use error::{innermost_message, ErrorKind, LibError};
