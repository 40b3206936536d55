//! `completions SHELL` and `man`: generated from the same clap definition as the parser, so they cannot drift.

use std::io::Write as _;

use clap::{Command, CommandFactory};

use crate::cli::Cli;
use crate::exit::Exit;

/// The command line as users see it: clap's generators list hidden subcommands too, and `__probe` is
/// internal. Command has no way to drop a subcommand, so the visible parts are copied into a new one.
fn public_command() -> Command {
    let full = Cli::command();
    let mut cmd = Command::new("fabric-preflight")
        .version(crate::build_info::VERSION)
        .subcommand_required(true)
        .args(full.get_arguments().cloned());
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    if let Some(after) = full.get_after_help() {
        cmd = cmd.after_help(after.clone());
    }
    for sub in full.get_subcommands().filter(|s| !s.is_hide_set()) {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd
}

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut public_command(), "fabric-preflight", &mut out);
    // A closed pipe is not an error worth reporting.
    let _ = std::io::stdout().write_all(&out);
    Ok(Exit::OK)
}

pub fn man() -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(public_command()).render(&mut out)?;
    let _ = std::io::stdout().write_all(&out);
    Ok(Exit::OK)
}
