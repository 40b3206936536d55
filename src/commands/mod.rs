//! One module per subcommand. Each `main` returns the exit code, or an error that means "usage" (exit 2).

pub mod list;
pub mod nccl;
pub mod pair;
pub mod run;
pub mod snapshot;
pub mod topo;
