//! libibverbs through `sideway` (safe API over `rdma-mummy-sys`, whose C shim dlopens libibverbs at run time):
//! the binary starts on a node without rdma-core and learns it from `ibv_get_device_list`'s errno instead.
//! Device discovery lives here; transfers through a port are in `measure::rdma_loopback`.

use std::error::Error;

use serde::{Deserialize, Serialize};
use sideway::ibverbs::device::{DeviceInfo, DeviceList, GetDeviceListErrorKind};

use super::LibError;
use crate::child::breadcrumb;
use crate::model::Library;

/// Vendor-answer key of the device list, shared by every probe that opens verbs.
pub const DEVICE_LIST_KEY: &str = "verbs.device_list";

/// What `ibv_get_device_list` said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Discovery {
    /// Device names (possibly none).
    Devices(Vec<String>),
    /// NULL with this errno.
    Failed { errno: i32, message: String },
}

impl Discovery {
    /// The names, or the failure as a library error beside the call's own answer (evidence).
    pub fn into_result(self) -> Result<Vec<String>, (LibError, String)> {
        match self {
            Discovery::Devices(d) => Ok(d),
            Discovery::Failed { errno, message } => Err((
                discovery_error(errno),
                format!("ibv_get_device_list = NULL, errno {errno} ({message})"),
            )),
        }
    }
}

/// The reason behind a failed device list, in words an operator acts on.
pub fn explain_discovery_errno(errno: i32) -> String {
    match errno {
        libc::EOPNOTSUPP => "rdma-core is not installed (libibverbs.so.1 could not be loaded)".into(),
        libc::ENOSYS => "the kernel offers no RDMA user-space access (no uverbs: /sys/class/infiniband_verbs missing)".into(),
        e => format!(
            "ibv_get_device_list failed: {}",
            std::io::Error::from_raw_os_error(e)
        ),
    }
}

/// A failed device list as a library error: EOPNOTSUPP is rdma-mummy-sys's word for "libibverbs could not be
/// loaded"; any other errno is the library's own answer.
pub fn discovery_error(errno: i32) -> LibError {
    let words = match errno {
        libc::EOPNOTSUPP => {
            return LibError::not_loaded(Library::Verbs, explain_discovery_errno(errno))
        }
        libc::ENOSYS => explain_discovery_errno(errno),
        _ => std::io::Error::from_raw_os_error(errno).to_string(),
    };
    LibError::failed(
        Library::Verbs,
        "ibv_get_device_list",
        Some(i64::from(errno)),
        words,
    )
}

pub fn discover() -> Discovery {
    breadcrumb("ibv_get_device_list");
    match DeviceList::new() {
        Ok(list) => Discovery::Devices(list.iter().map(|d| d.name()).collect()),
        Err(e) => {
            #[allow(unreachable_patterns)] // the kind enum is non_exhaustive
            let errno = match &e.0 {
                GetDeviceListErrorKind::Ibverbs(io) => io.raw_os_error().unwrap_or(0),
                _ => 0,
            };
            Discovery::Failed {
                errno,
                message: chain(&e),
            }
        }
    }
}

/// An error with its sources on one line (sideway's own messages are generic: "failed to open device").
pub(crate) fn chain(e: &dyn Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_errnos_explained() {
        assert!(explain_discovery_errno(95).contains("rdma-core is not installed"));
        assert!(explain_discovery_errno(38).contains("uverbs"));
        assert!(explain_discovery_errno(13).contains("ibv_get_device_list failed"));
    }

    #[test]
    fn discovery_runs_without_hardware() {
        // On the build machine: no rdma-core → Failed(95), or an empty list; never a panic.
        match discover() {
            Discovery::Devices(_) => {}
            Discovery::Failed { errno, message } => assert_ne!(errno, 0, "{message}"),
        }
    }
}
