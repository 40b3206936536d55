//! Vendor libraries, opened at run time (dlopen) so the binary starts on a node without them.

pub mod cufile;
pub mod verbs;
