//! Command-line interface (clap derive only; no behaviour here).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::collective::variant::CollectiveMode;
use crate::profile::NcclExpect;
use crate::report::Format;

#[derive(Debug, Parser)]
#[command(
    name = "fabric-preflight",
    version = crate::build_info::VERSION,
    about = "Checks a GPU node's data paths (GPUDirect RDMA, GPUDirect Storage, IB/RoCE, PCIe, NCCL transport) before work lands on it",
    after_help = crate::exit::HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the checks of a profile on this host (or a recorded tree) and report
    #[command(after_help = crate::exit::HELP)]
    Run(RunArgs),
    /// Every check id, what it verifies and what it needs
    List,
    /// What a check reads, why it matters, and how to fix what it reports; what a finding code means and
    /// which remediation step fixes it; without an argument, every finding code
    Explain {
        /// Check id (e.g. gdr.kernel_path) or finding code (e.g. GDR001)
        id: Option<String>,
    },
    /// Built-in profiles and what each expects
    Profiles,
    /// GPU/NIC/NVMe PCIe distance matrix (PIX/PXB/PHB/NODE/SYS), NUMA nodes and the narrowest link of each
    Topo(TopoArgs),
    /// Read NCCL_DEBUG=INFO output and report which transport NCCL chose and used
    #[command(after_help = NCCL_EXIT_HELP)]
    Nccl(NcclArgs),
    /// Run the checks live and record what they read (host files, vendor answers) into DIR for `run --root DIR`
    Snapshot(SnapshotArgs),
    /// Fabric test between two nodes (or each node and its ring neighbours): RDMA WRITE/READ Gb/s and SEND/RECV
    /// latency per port pair, after a token-checked TCP handshake
    #[command(after_help = crate::exit::HELP)]
    Pair(PairArgs),
    /// Run an NCCL job (nccl-tests, or the built-in torch workload) through the site's launcher and judge it:
    /// bus bandwidth against the profile, #wrong, the transport proven from its own NCCL log, errors, hangs
    /// (each rank's last NCCL line), and each local rank's NIC against the one nearest its GPU
    #[command(after_help = crate::exit::HELP)]
    Collective(CollectiveArgs),
    /// Find the node or link behind a failing multi-node test: screen the nodes in groups through the site's
    /// launcher (a COMMAND template per group), split failed groups, confirm each suspect against a known-good
    /// node, probe across the boundary when both halves pass
    #[command(after_help = ISOLATE_EXIT_HELP)]
    Isolate(IsolateArgs),
    /// Shell completion script on stdout (e.g. `fabric-preflight completions bash > /etc/bash_completion.d/fabric-preflight`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The manual page (roff) on stdout (e.g. `fabric-preflight man | man -l -`)
    Man,
    /// Runs one probe in a child process (internal: used by `run` to isolate vendor libraries)
    #[command(name = "__probe", hide = true)]
    ProbeChild,
    /// Gathers one vendor library's facts in a child process (internal: used by `run`, once per library)
    #[command(name = "__facts", hide = true)]
    FactsChild,
    /// Lists ports or measures one port pair in a child process (internal: used by `pair`)
    #[command(name = "__pair", hide = true)]
    PairChild,
}

pub use crate::report::output::ColorChoice;

/// Where and how a report is written: shared by `run` and `pair`, so both take the same flags and mean the same.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Report")]
pub struct ReportArgs {
    /// Format written to stdout (or to a bare --output PATH)
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,

    /// Also write a report to a file: FORMAT=PATH (json=out.json, junit=out.xml), or PATH for --format.
    /// Repeatable.
    #[arg(long, value_name = "[FORMAT=]PATH")]
    pub output: Vec<String>,

    /// Warnings fail the run (exit 1)
    #[arg(long)]
    pub strict: bool,

    /// Colour the table (auto: only on a terminal, and not when NO_COLOR is set)
    #[arg(long, value_enum, default_value = "auto")]
    pub color: ColorChoice,

    /// Write a summary of at most 4096 bytes here (Kubernetes: /dev/termination-log)
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,

    /// The table also details skipped checks (their evidence: why each was skipped)
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Profile: a built-in name (see `profiles`), `auto` (chosen from the GPUs and RDMA ports the host
    /// shows), or a path to a YAML file
    #[arg(long, value_name = "NAME|auto|PATH", default_value = "generic")]
    pub profile: String,

    /// Run only these checks (comma-separated ids)
    #[arg(long, value_name = "ID,..", value_delimiter = ',')]
    pub only: Vec<String>,

    /// Leave these checks out (comma-separated ids)
    #[arg(long, value_name = "ID,..", value_delimiter = ',')]
    pub skip: Vec<String>,

    /// Read /proc, /sys, /dev, /etc and /run under DIR instead of / (a recorded tree)
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Deadline for the whole run, in seconds (more than 0, at most 86400)
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    pub timeout: f64,

    /// The table on stdout shows only what fails the run (nothing when it passes); files are complete
    #[arg(long, short)]
    pub quiet: bool,

    /// Report this host by NAME (JSON `host.hostname` and `host.node_name`, the JUnit suite, Prometheus'
    /// `host` label); Kubernetes: the node name from the downward API. Default: the host name
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// NCCL_DEBUG=INFO output to judge with nccl.transport (repeatable)
    #[arg(long, value_name = "PATH")]
    pub nccl_log: Vec<PathBuf>,

    /// Directory on the filesystem to test with gds.read (default: the system temp dir)
    #[arg(long, value_name = "DIR")]
    pub gds_dir: Option<PathBuf>,
    // Last: its "Report" heading would otherwise take in the flags after it.
    #[command(flatten)]
    pub report: ReportArgs,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["listen", "connect", "ring", "summarize"])))]
pub struct PairArgs {
    /// Wait for the peer on [ADDR:]PORT (all addresses when ADDR is left out)
    #[arg(long, value_name = "[ADDR:]PORT")]
    pub listen: Option<String>,

    /// Reach the listening peer at HOST:PORT (retried until it is up or the deadline passes)
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,

    /// Test both ring neighbours; rank and peers from Slurm, a Kubernetes Indexed Job, MPI, or --peers/--rank
    #[arg(long)]
    pub ring: bool,

    /// Read the JSON reports of every ring node and name the node common to the failing pairs
    #[arg(long, value_name = "REPORT.json", num_args = 1..)]
    pub summarize: Vec<PathBuf>,

    /// Ring: the TCP port every node listens on (an entry HOST:PORT in --peers names its own)
    #[arg(long, value_name = "PORT", default_value_t = 18515)]
    pub port: u16,

    /// Ring by hand: every node, in ring order (comma-separated)
    #[arg(long, value_name = "H1,H2,..", value_delimiter = ',')]
    pub peers: Vec<String>,

    /// Ring by hand: this node's index in --peers
    #[arg(long, value_name = "N")]
    pub rank: Option<usize>,

    /// Ring under MPI: the hostfile given to mpirun (one host per line)
    #[arg(long, value_name = "PATH")]
    pub hostfile: Option<String>,

    /// Ring under a Kubernetes Indexed Job: the Job's headless Service
    #[arg(long, value_name = "NAME")]
    pub service: Option<String>,

    /// Ring under a Kubernetes Indexed Job: the Job's completions
    #[arg(long, value_name = "N")]
    pub size: Option<usize>,

    /// Job token both ends must hold (else --token-file, FABRIC_PREFLIGHT_TOKEN, and under Slurm the job and
    /// step id, which keeps jobs apart but is no secret: any user can read it with squeue). A token on the
    /// command line is visible to every user in `ps`: prefer --token-file
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// Read the job token from FILE: a regular file of at most 4 KiB that only its owner may read (mode 600 or
    /// stricter; a file group or others may read is refused). The secret to use when security matters
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Read /proc and /sys under DIR instead of / (a recorded tree): the ports offered to the peer. Transfers
    /// still go through this host's libibverbs
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Report this host by NAME, and announce it to the peer under it (JSON `host.hostname` and
    /// `host.node_name`, the JUnit suite); Kubernetes: the node name from the downward API. Default: the host
    /// name. A ring node keeps its ring name (its --peers entry) in the ring's links
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// Profile whose thresholds judge the pairs (pair_bandwidth_pct_of_link, pair_latency_us)
    #[arg(long, value_name = "NAME|PATH", default_value = "generic")]
    pub profile: String,

    /// Deadline for the whole run (handshake included), in seconds (more than 0, at most 86400)
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub timeout: f64,

    /// Bandwidth message size in KiB (both ends must agree)
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    pub message_size: usize,

    /// Messages per bandwidth phase (WRITE, then READ)
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub messages: u32,

    /// SEND/RECV round trips for the latency percentiles
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub pings: u32,

    /// Each phase (WRITE, READ, ping-pong) ends after its count or this many seconds (perftest's -D)
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub phase_time: f64,

    /// Local ACK timeout of the queue pairs, as the verbs exponent (perftest's -u, NCCL_IB_TIMEOUT): each try
    /// waits 4.096 us x 2^EXP for the peer's ACK, and a transfer fails with "retry counter exceeded" after 7
    /// tries. 14 is 67 ms a try; raise it where the fabric pauses longer and is still healthy (NCCL's default, 20,
    /// is 4.3 s a try)
    #[arg(long, value_name = "EXP", default_value_t = crate::measure::rc::DEFAULT_ACK_TIMEOUT,
          value_parser = clap::value_parser!(u8).range(1..=31))]
    pub ack_timeout: u8,

    /// Memory the transfers move. auto: GPU memory (DMA-BUF, else peermem) where the NVIDIA driver lists GPUs,
    /// plus host memory always as the control; host: host memory only; gpu: GPU memory required, the GPUs
    /// being the ones CUDA lists
    #[arg(long, value_enum, default_value = "auto")]
    pub memory: crate::measure::memory::MemoryChoice,

    // Last: its "Report" heading would otherwise take in the flags after it.
    #[command(flatten)]
    pub report: ReportArgs,
}

/// The built-in workloads of `collective`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// A PyTorch all-reduce benchmark printing nccl-tests' table (python3 with torch on the nodes)
    Torch,
}

#[derive(Debug, Args)]
pub struct CollectiveArgs {
    /// Profile: bus-bandwidth floors (thresholds.nccl_busbw_gbytes_per_sec) and the expected transport
    #[arg(long, value_name = "NAME|auto|PATH", default_value = "generic")]
    pub profile: String,

    /// Transport the job must use (default: the profile's expect.nccl_transport, else gdrdma)
    #[arg(long, value_enum)]
    pub expect: Option<NcclExpect>,

    /// The COMMAND's process group is ended (SIGTERM, then SIGKILL) after this many seconds: a hang (more than 0,
    /// at most 86400)
    #[arg(long, value_name = "SECS", default_value_t = 900.0)]
    pub timeout: f64,

    /// Run the built-in workload: its script is written to the log directory and appended to COMMAND (default
    /// COMMAND: python3, which starts one process per GPU)
    #[arg(long, value_enum)]
    pub workload: Option<Workload>,

    /// An argument for the workload script (repeatable): --min-bytes, --max-bytes, --iters, --nproc,
    /// --distinct-hosts
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    pub workload_arg: Vec<String>,

    /// Keep the COMMAND's output and the per-rank NCCL logs in DIR (created; on a shared filesystem for
    /// multi-node runs of the workload). Default: a temporary directory, removed at the end
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,

    /// Read /sys under DIR instead of / (a recorded tree): the PCI tree the rail map is judged against
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Report this host by NAME (see `run --node-name`); its ranks are the ones placed on the PCI tree
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// The collective the COMMAND runs, where its output does not say (a wrapper script, nccl-tests output
    /// without `# Collective test starting:`): picks the busbw floor. Unnamed, busbw is an error, never a pass.
    #[arg(long, value_name = "NAME", value_parser = crate::profile::BusbwLimits::COLLECTIVES)]
    pub collective: Option<String>,

    /// job: the COMMAND as given; nic-loopback: one node through its own NICs, then over NVLink only, side by
    /// side; per-rail: one communicator per local rank index, each rail judged
    #[arg(long, value_enum, default_value = "job")]
    pub mode: CollectiveMode,

    /// GPUs per node, the rails of --mode per-rail (default: the GPUs on this host's PCI bus)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub rails: Option<u32>,

    /// The job: `srun … all_reduce_perf -b 8M -e 4G -f 2 -g 1`, `mpirun …`, `torchrun …`, `all_reduce_perf -g 8`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,

    // Last: its "Report" heading would otherwise take in the flags after it.
    #[command(flatten)]
    pub report: ReportArgs,
}

#[derive(Debug, Args)]
pub struct IsolateArgs {
    /// The nodes: a comma-separated list or a Slurm node list (`gpu[01-64]`). Default: SLURM_JOB_NODELIST
    #[arg(long, value_name = "LIST", conflicts_with = "hostfile")]
    pub nodes: Option<String>,

    /// The nodes from an MPI hostfile (one host per line; `slots=` and comments ignored)
    #[arg(long, value_name = "PATH")]
    pub hostfile: Option<PathBuf>,

    /// Which nodes share a switch or clique: `scontrol show topology` output, or `NODE GROUP` lines
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,

    /// A group whose busbw is below this many GB/s fails, even when its job passed (default: each report's floor)
    #[arg(long, value_name = "GB/S")]
    pub floor: Option<f64>,

    /// Each group's job is ended (SIGTERM, then SIGKILL) after this many seconds, and the group fails
    #[arg(long, value_name = "SECS", default_value_t = 900.0)]
    pub test_timeout: f64,

    /// At most this many rounds; what is open then is reported unconfirmed or untested
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub max_rounds: u16,

    /// Each group's report, hostfile and output go here (created; default: a new directory under the system's
    /// temporary directory, kept). On a filesystem the jobs see when they write their reports remotely
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,

    /// Format written to stdout
    #[arg(long, value_enum, default_value = "table")]
    pub format: ViewFormat,

    /// Also write the report: json=PATH, junit=PATH, html=PATH, or culprits=PATH (one culprit node per line,
    /// for a drain or taint command). Repeatable
    #[arg(long, value_name = "FORMAT=PATH")]
    pub output: Vec<String>,

    /// The job run per group, with {nodes}, {count}, {hostfile}, {report} (where it writes its JSON report) and
    /// {test} replaced: `srun -N{count} -w {nodes} fabric-preflight collective --output json={report} -- …`
    #[arg(last = true, value_name = "COMMAND", required = true)]
    pub command: Vec<String>,
}

/// `--help` text for the codes of `isolate`.
pub const ISOLATE_EXIT_HELP: &str = "Exit codes:
  0  every node healthy: each passed a group test at its floor
  1  a culprit node or link was found (confirmed against known-good nodes)
  2  usage error (bad flags, no nodes, a template without {nodes} or {report}, unreadable topology)
  3  undetermined: no culprit, but nodes left unconfirmed or untested (or interrupted)";

/// `--help` text for the codes of `nccl`.
pub const NCCL_EXIT_HELP: &str = "Exit codes:
  0  the transport meets --expect
  1  it does not (also: no channel lines, but the selected network already cannot meet --expect)
  2  usage error (bad flags, unreadable log)
  3  undetermined: the log has no channel (` via `) lines, so it does not show the data path";

/// Output of the `topo` and `nccl` commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ViewFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct TopoArgs {
    /// Read /sys under DIR instead of / (a recorded tree)
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: ViewFormat,
}

#[derive(Debug, Args)]
pub struct NcclArgs {
    /// Logs of one job (several: one per rank or host); `-` or nothing reads standard input
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Transport the job must have used (gdrdma: IB, OFI or another non-socket plugin with GDRDMA on every NET
    /// channel)
    #[arg(long, value_enum, default_value = "gdrdma")]
    pub expect: NcclExpect,

    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: ViewFormat,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Empty or new directory to write the recorded tree into
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Profile whose checks run while recording (a built-in name or a YAML file)
    #[arg(long, value_name = "NAME|PATH", default_value = "generic")]
    pub profile: String,

    /// Record only these checks (comma-separated ids)
    #[arg(long, value_name = "ID,..", value_delimiter = ',')]
    pub only: Vec<String>,

    /// Leave these checks out (comma-separated ids)
    #[arg(long, value_name = "ID,..", value_delimiter = ',')]
    pub skip: Vec<String>,

    /// Deadline for the whole run, in seconds (more than 0, at most 86400)
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    pub timeout: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
