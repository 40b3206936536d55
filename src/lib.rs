//! fabric-preflight as a library: the binary (`main.rs`), the integration tests, the benchmarks and the fuzz
//! targets use it. Modules are crate-private unless one of those needs them (so dead code warns); the public
//! ones are the binary's commands and CLI, the probe registry, and the parsers the fuzz targets drive.

pub(crate) mod auto_profile;
pub(crate) mod bounded_command;
pub mod build_info;
pub(crate) mod child;
pub mod cli;
pub(crate) mod collective;
pub mod commands;
pub(crate) mod dynlib;
pub mod exit;
pub mod host;
pub(crate) mod input;
pub(crate) mod interrupt;
pub mod isolate;
pub(crate) mod measure;
pub(crate) mod model;
pub mod nccl;
pub mod pair;
pub mod probe;
pub mod probes;
pub mod profile;
pub(crate) mod progress;
pub(crate) mod recording;
pub mod report;
/// Public for the `static_run` bench, which builds a `rules::topology::PciTree`.
pub mod rules;
pub mod runner;
pub mod sysfs;
pub(crate) mod tasks;
pub(crate) mod version;

/// The CUDA driver entry points this tool resolves: the integration tests build stand-in libraries exporting them.
pub use dynlib::cuda::REQUIRED_SYMBOLS as CUDA_REQUIRED_SYMBOLS;
