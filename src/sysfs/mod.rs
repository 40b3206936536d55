//! Readers of kernel and driver files. Pure `parse_*(&str)` functions plus `read_*(&Host)` that do the I/O;
//! no verdicts here. When two probes need the same file, its parser lives here exactly once.

pub mod infiniband;
pub mod kernel;
pub mod modules;
pub mod nvidia;
pub mod pci_device;
