//! One module per subcommand. Each `main` returns the exit code, or an error that means "usage" (exit 2).

pub mod collective;
pub mod docs;
pub mod findings;
pub mod isolate;
pub mod list;
pub mod nccl;
pub mod pair;
pub mod run;
pub mod snapshot;
pub mod topo;

use std::time::Duration;

use crate::cli::ReportArgs;
use crate::report::output::{self, Delivery};

/// Writes `text` to stdout and returns the command's exit code: `code`, or [`crate::exit::output_lost`]'s when
/// the output could not be written.
pub fn emit(text: &str, code: u8) -> u8 {
    match crate::report::output::write_stdout(text) {
        Ok(()) => code,
        Err(e) => {
            eprintln!("fabric-preflight: writing to stdout: {e}");
            crate::exit::output_lost(code)
        }
    }
}

/// `--timeout`-like flags: a deadline in seconds, more than 0 and at most a day.
pub fn seconds_flag(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    crate::profile::timeout_duration(secs).map_err(|e| anyhow::anyhow!("{flag} {e}"))
}

/// Where the report of `run` or `pair` goes, from their shared flags, every file found writable now.
pub fn delivery(flags: &ReportArgs) -> anyhow::Result<Delivery> {
    Delivery::new(
        &flags.output,
        flags.format,
        flags.termination_log.as_deref(),
        flags.color,
        flags.verbose,
    )
}

/// A usage error of `run` or `pair`, its reason also written to `--termination-log`.
pub fn usage_error(flags: &ReportArgs, e: anyhow::Error) -> anyhow::Error {
    output::usage_error(flags.termination_log.as_deref(), e)
}
