//! One module per subcommand. Each `main` returns the exit code, or an error that means "usage" (exit 2).

pub mod collective;
pub mod docs;
pub mod list;
pub mod nccl;
pub mod pair;
pub mod run;
pub mod snapshot;
pub mod topo;

use std::io::Write;

/// Writes a command's output to stdout. A reader that stopped reading (`| head`) chose to: not an error. Any
/// other failure (stdout on `/dev/full`, a closed descriptor) is.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes `text` to stdout and returns the command's exit code: `code`, or [`crate::exit::output_lost`]'s when
/// the output could not be written.
pub fn emit(text: &str, code: u8) -> u8 {
    match write_stdout(text) {
        Ok(()) => code,
        Err(e) => {
            eprintln!("fabric-preflight: writing to stdout: {e}");
            crate::exit::output_lost(code)
        }
    }
}
