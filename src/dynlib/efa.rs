//! libefa, the EFA provider of libibverbs: whether it loads. Opened at run time like every vendor library,
//! and only asked (not called into): its presence beside libibverbs is what `efa.devices` judges.

use serde::{Deserialize, Serialize};

use crate::child::breadcrumb;

/// Vendor-answer key: whether libefa.so.1 could be loaded.
pub const LIBEFA_KEY: &str = "efa.libefa";
pub const LIBEFA: &str = "libefa.so.1";

/// What dlopen said about libefa.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loaded(pub Result<String, String>);

pub fn load_libefa() -> Loaded {
    breadcrumb("dlopen libefa.so.1");
    // SAFETY: libefa's constructors only register its verbs provider.
    Loaded(match unsafe { libloading::Library::new(LIBEFA) } {
        Ok(_) => Ok(LIBEFA.to_string()),
        Err(e) => Err(e.to_string()),
    })
}
