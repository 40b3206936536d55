//! Readers of kernel and driver files. Pure `parse_*(&str)` functions plus `read_*(&Host)` that do the I/O;
//! no verdicts here. When two probes need the same file, its parser lives here exactly once.

pub(crate) mod aer;
pub mod cufile_json;
pub(crate) mod dmi;
pub(crate) mod efa;
pub mod hypervisor;
pub mod infiniband;
pub mod iommu;
pub mod kernel;
pub mod modules;
pub mod mountinfo;
pub(crate) mod net;
pub mod netaddr;
pub mod nvfs;
pub mod nvidia;
pub mod pci;
pub mod pci_config;
pub mod pci_device;
pub(crate) mod pci_ids;
pub(crate) mod stable;
pub mod udev;
