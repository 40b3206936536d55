//! fabric-preflight: parse the command line, dispatch, exit with the documented code.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use fabric_preflight::cli::{Cli, Cmd};
use fabric_preflight::exit::Exit;
use fabric_preflight::report::{self, termination};
use fabric_preflight::runner::{facts, probe_child};
use fabric_preflight::{commands, probes};

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // A flag clap refused is an exit 2 like any other: its reason goes to --termination-log when that one
        // could be read from the arguments (--help and --version are not errors).
        if e.use_stderr() {
            if let Some(path) = termination_log_arg(std::env::args_os()) {
                let first_line = e.to_string().lines().next().unwrap_or_default().to_string();
                let _ = report::file::replace(
                    std::path::Path::new(&path),
                    &termination::render_usage_error(&first_line),
                );
            }
        }
        e.exit()
    });
    let code = match cli.cmd {
        // The one place that tells the probe child where the probes are, and the facts child where their
        // fact sources are.
        Cmd::ProbeChild => return ExitCode::from(probe_child::child_main(probes::find) as u8),
        Cmd::PairChild => return ExitCode::from(fabric_preflight::pair::child::child_main() as u8),
        Cmd::FactsChild => return ExitCode::from(facts::child_main(probes::fact_source) as u8),
        Cmd::Run(args) => commands::run::main(args),
        Cmd::List => commands::list::main(),
        Cmd::Explain { id } => commands::list::explain(id.as_deref()),
        Cmd::Profiles => commands::list::profiles(),
        Cmd::Topo(args) => commands::topo::main(args),
        Cmd::Nccl(args) => commands::nccl::main(args),
        Cmd::Snapshot(args) => commands::snapshot::main(args),
        Cmd::Pair(args) => commands::pair::main(args),
        Cmd::Collective(args) => commands::collective::main(args),
        Cmd::Isolate(args) => commands::isolate::main(args),
        Cmd::Completions { shell } => commands::docs::completions(shell),
        Cmd::Man => commands::docs::man(),
    };
    ExitCode::from(code.unwrap_or_else(|err| {
        eprintln!("fabric-preflight: {err:#}");
        Exit::USAGE
    }))
}

/// The value of `--termination-log PATH` or `--termination-log=PATH` in the raw arguments of `run` or `pair`.
fn termination_log_arg(args: impl Iterator<Item = OsString>) -> Option<OsString> {
    let mut args = args
        .skip_while(|a| a != "run" && a != "pair" && a != "collective")
        .skip(1);
    while let Some(arg) = args.next() {
        if arg == "--" {
            break; // `collective`'s COMMAND follows: its flags are not ours
        }
        if arg == "--termination-log" {
            return args.next();
        }
        if let Some(path) = arg
            .to_str()
            .and_then(|a| a.strip_prefix("--termination-log="))
        {
            return Some(path.into());
        }
    }
    None
}
