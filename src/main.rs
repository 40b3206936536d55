//! fabric-preflight: parse the command line, dispatch, exit with the documented code.

use std::process::ExitCode;

use clap::Parser;

use fabric_preflight::cli::{Cli, Cmd};
use fabric_preflight::exit::Exit;
use fabric_preflight::{commands, isolate};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::ProbeChild => return ExitCode::from(isolate::child_main() as u8),
        Cmd::Run(args) => commands::run::main(args),
        Cmd::List => commands::list::main(),
        Cmd::Explain { id } => commands::list::explain(&id),
        Cmd::Profiles => commands::list::profiles(),
        Cmd::Topo(args) => commands::topo::main(args),
        Cmd::Nccl(args) => commands::nccl::main(args),
        Cmd::Snapshot(args) => commands::snapshot::main(args),
        Cmd::Pair(args) => commands::pair::main(args),
    };
    ExitCode::from(code.unwrap_or_else(|err| {
        eprintln!("fabric-preflight: {err:#}");
        Exit::USAGE
    }))
}
