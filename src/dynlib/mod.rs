//! Vendor libraries opened at run time (dlopen): nothing here is linked, so the binary starts on a host without
//! them. Each module turns library answers into plain Rust values or a typed [`LibError`] (library, call, code,
//! the library's words); no verdicts here.

pub(crate) mod cuda;
pub(crate) mod cuda_dmabuf;
pub(crate) mod cufile;
pub(crate) mod efa;
pub(crate) mod error;
pub(crate) mod fabric;
pub(crate) mod nvml;
pub(crate) mod verbs;

pub use error::{innermost_message, ErrorKind, LibError};
