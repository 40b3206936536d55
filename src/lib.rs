//! fabric-preflight as a library: the binary (`main.rs`), the integration tests, the benchmarks and the fuzz
//! targets all use these modules.

pub mod build_info;
pub mod child;
pub mod cli;
pub mod commands;
pub mod dynlib;
pub mod exit;
pub mod gds_target;
pub mod host;
pub mod interrupt;
pub mod measure;
pub mod model;
pub mod nccl;
pub mod pair;
pub mod presence;
pub mod probe;
pub mod probes;
pub mod profile;
pub mod progress;
pub mod recording;
pub mod report;
pub mod runner;
pub mod sysfs;
pub mod tasks;
pub mod threshold;
pub mod topology;
pub mod transfer_verdict;
pub mod version;

/// Moved to [`recording`]; kept while the probes and the child protocol move to the new path.
pub use recording as answers;
