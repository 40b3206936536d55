//! Which run-time-loaded library (its identity alone: opening and calling it is `dynlib`'s job).

use serde::{Deserialize, Serialize};

/// The libraries this tool opens at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Library {
    /// `libnvidia-ml.so.1`
    Nvml,
    /// `libcuda.so.1`
    Cuda,
    /// `libcufile.so.0`
    Cufile,
    /// `libibverbs.so.1`
    Verbs,
    /// `libefa.so.1`, rdma-core's EFA provider beside libibverbs
    Efa,
    /// `libfabric.so.1`, whose `efa` provider aws-ofi-nccl carries NCCL over
    Fabric,
}

impl Library {
    pub fn soname(self) -> &'static str {
        match self {
            Library::Nvml => "libnvidia-ml.so.1",
            Library::Cuda => "libcuda.so.1",
            Library::Cufile => "libcufile.so.0",
            Library::Verbs => "libibverbs.so.1",
            Library::Efa => "libefa.so.1",
            Library::Fabric => "libfabric.so.1",
        }
    }
}

impl Library {
    /// The library a call (as named in breadcrumbs) belongs to: `nvmlInit_v2` → NVML, `cuFileRead` → cuFile,
    /// `cuInit` → CUDA, `ibv_reg_mr` → verbs, `dlopen(libcuda)` → CUDA, `fi_getinfo` → libfabric.
    pub fn owning(call: &str) -> Option<Library> {
        if call.starts_with("fi_") || call.contains("libfabric") {
            Some(Library::Fabric)
        } else if call.contains("libefa") {
            Some(Library::Efa)
        } else if call.starts_with("nvml") || call.contains("libnvidia-ml") {
            Some(Library::Nvml)
        } else if call.starts_with("cuFile") || call.contains("libcufile") {
            Some(Library::Cufile)
        } else if call.starts_with("cu") || call.contains("libcuda") {
            Some(Library::Cuda)
        } else if call.starts_with("ibv") || call.contains("libibverbs") {
            Some(Library::Verbs)
        } else {
            None
        }
    }
}
