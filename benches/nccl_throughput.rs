//! Throughput of the NCCL log analysis on one core, against `grep -c NCCL` (and `rg -c NCCL` when installed)
//! on the same file in the same run. `cargo bench --bench nccl_throughput`; size with NCCL_BENCH_MIB
//! (default 256). NCCL_BENCH_KEEP=DIR keeps the generated logs there, for profiling the analysis alone.
//!
//! The generated logs are what a job's combined output looks like: mostly application noise (training
//! progress, Python warnings) with NCCL INFO init lines, topology dumps, init lines and channel lines from
//! 1024 ranks; issue 19's case, four lines in five NCCL's from 128 ranks; then the worst case, every line an
//! NCCL line, plain and as a Kubernetes CRI file stores it. Each case prints the analysis' CPU time over
//! grep's.
//!
//! Each figure is the best of 3 runs, by wall clock and by CPU time (getrusage: this process for the
//! analysis, the children for the tools). On a shared machine the CPU-time figure is the one-core speed;
//! the wall-clock one also counts time waiting for a core. Peak resident memory (VmHWM) after the analysis
//! shows that it stays flat.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fabric_preflight::nccl::{Analyzer, Reader};

/// Reproducible pseudo-random numbers without a dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `noise_pct` percent application lines, the rest NCCL lines of `ranks` ranks (init, topology, channels);
/// with `cri`, each line stored as containerd does (`<time> stderr F <line>`).
fn generate(
    path: &Path,
    bytes: u64,
    noise_pct: u64,
    ranks: u64,
    cri: bool,
) -> std::io::Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut written = 0u64;
    let mut line = String::with_capacity(256);
    while written < bytes {
        line.clear();
        let rank = rng.below(ranks);
        let host = rank / 8;
        let dev = rank % 8;
        let pid = 30000 + rank;
        // Noise picks one of the three noise shapes, NCCL one of the NCCL shapes (1 in 100 an init line).
        let roll = if rng.below(100) < noise_pct {
            rng.below(95)
        } else if rng.below(100) == 0 {
            100
        } else {
            95 + rng.below(5)
        };
        use std::fmt::Write as _;
        if cri {
            let _ = write!(
                line,
                "2026-11-29T10:15:{:02}.{:09}Z stderr F ",
                rng.below(60),
                rng.below(1_000_000_000)
            );
        }
        let _ = match roll {
            // Application noise.
            0..=79 => writeln!(
                line,
                "[rank{rank}]: step {} | loss {:.4} | lr 3.0e-04 | grad_norm {:.3} | tokens/s {} | mem 71.2GiB",
                rng.below(100_000),
                rng.below(10_000) as f64 / 1000.0,
                rng.below(5000) as f64 / 1000.0,
                rng.below(90_000)
            ),
            80..=89 => writeln!(
                line,
                "{}%|{}| {}/{} [{:02}:{:02}<{:02}:{:02}, {:.2}it/s]",
                rng.below(100),
                "#".repeat(rng.below(20) as usize),
                rng.below(5000),
                5000,
                rng.below(60),
                rng.below(60),
                rng.below(60),
                rng.below(60),
                rng.below(900) as f64 / 100.0
            ),
            90..=94 => writeln!(
                line,
                "/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py:{}: UserWarning: barrier() called with device_ids; the default process group will be used",
                rng.below(400)
            ),
            // NCCL.
            95 => writeln!(
                line,
                "gpu-a{host:03}:{pid}:{pid} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB eth0:10.1.{}.{}<0>",
                host / 256,
                host % 256
            ),
            96 => writeln!(
                line,
                "gpu-a{host:03}:{pid}:{pid} [{dev}] NCCL INFO Trees [0] {}/-1/-1->{rank}->{} [1] -1/-1/-1->{rank}->{}",
                rank + 8,
                rank.saturating_sub(8),
                rank + 1
            ),
            97 => writeln!(
                line,
                "gpu-a{host:03}:{pid}:{} [{dev}] NCCL INFO Channel {:02}/0 : {rank}[{dev}] -> {}[{dev}] via P2P/CUMEM/read",
                pid + 90,
                rng.below(32),
                rank + 1
            ),
            98 | 99 => writeln!(
                line,
                "gpu-a{host:03}:{pid}:{} [{dev}] NCCL INFO Channel {:02}/0 : {rank}[{dev}] -> {}[{dev}] [send] via NET/IB/{}/GDRDMA",
                pid + 91,
                rng.below(32),
                (rank + 8) % ranks,
                dev / 2
            ),
            _ => writeln!(
                line,
                "gpu-a{host:03}:{pid}:{} [{dev}] NCCL INFO ncclCommInitRank comm 0x55d{rank:04x} rank {rank} nranks {ranks} cudaDev {dev} nvmlDev {dev} busId {dev}b000 commId 0x9c65 - Init COMPLETE",
                pid + 92
            ),
        };
        out.write_all(line.as_bytes())?;
        written += line.len() as u64;
    }
    out.flush()?;
    Ok(written)
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// CPU seconds (user + system) used so far by this process or by its waited-for children.
fn cpu_seconds(who: libc::c_int) -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Best of `runs` of `f`: (wall clock, CPU time of `who`).
fn best_of(runs: usize, who: libc::c_int, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut best = (Duration::MAX, Duration::MAX);
    for _ in 0..runs {
        let (t, cpu) = (Instant::now(), cpu_seconds(who));
        f();
        best.0 = best.0.min(t.elapsed());
        best.1 = best.1.min(Duration::from_secs_f64(cpu_seconds(who) - cpu));
    }
    best
}

fn report(label: &str, bytes: u64, (wall, cpu): (Duration, Duration), what: &str) {
    println!(
        "{label:<28} {:>6.0} MB/s per CPU-second  {:>6.0} MB/s wall  ({what})",
        mb_per_s(bytes, cpu),
        mb_per_s(bytes, wall),
    );
}

/// Times `program args path` (best of 3); `None` when it is not installed.
fn time_tool(
    program: &str,
    args: &[&str],
    path: &Path,
    bytes: u64,
) -> Option<(Duration, Duration)> {
    if Command::new(program).arg("--version").output().is_err() {
        println!("{program:<28} not installed");
        return None;
    }
    let mut matches = String::new();
    let times = best_of(3, libc::RUSAGE_CHILDREN, || {
        let out = Command::new(program)
            .args(args)
            .arg(path)
            .output()
            .expect("tool runs");
        matches = String::from_utf8_lossy(&out.stdout).trim().to_string();
    });
    let label = format!("{program} {}", args.join(" "));
    report(&label, bytes, times, &format!("count {matches}"));
    Some(times)
}

/// Peak resident memory of this process so far, in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    // `cargo bench` passes `--bench`; accept and ignore libtest-style arguments.
    let mib: u64 = std::env::var("NCCL_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let dir = tempfile::tempdir().expect("temp dir");
    for (label, noise_pct, ranks, cri) in [
        ("95% application noise, 1024 ranks", 95, 1024, false),
        ("4 lines in 5 NCCL's, 128 ranks", 20, 128, false),
        ("all NCCL lines, 1024 ranks", 0, 1024, false),
        ("all NCCL lines, 1024 ranks, CRI-stored", 0, 1024, true),
    ] {
        let path = dir
            .path()
            .join(format!("nccl-bench-{noise_pct}-{ranks}-{cri}.log"));
        let t = Instant::now();
        let bytes = generate(&path, mib << 20, noise_pct, ranks, cri).expect("generate log");
        println!(
            "\n{label}: generated {:.0} MiB in {:.1} s",
            bytes as f64 / f64::from(1u32 << 20),
            t.elapsed().as_secs_f64()
        );
        bench_one(&path, bytes);
        if let Some(keep) = std::env::var_os("NCCL_BENCH_KEEP") {
            let kept = Path::new(&keep).join(path.file_name().expect("file name"));
            std::fs::copy(&path, kept).expect("keep the log");
        }
        std::fs::remove_file(&path).ok();
    }
    println!(
        "\npeak resident memory of the bench process: {:.1} MiB",
        peak_rss_mib()
    );
}

fn bench_one(path: &Path, bytes: u64) {
    // Warm the page cache so every tool reads from memory (streamed: the bench's own memory stays small).
    let _ = std::io::copy(&mut File::open(path).expect("open"), &mut std::io::sink());
    let mut verdict = String::new();
    let mut channels = 0;
    let ours = best_of(3, libc::RUSAGE_SELF, || {
        let (mut reader, mut a) = (Reader::new(), Analyzer::new());
        reader
            .read(&mut a, "bench", File::open(path).expect("open"), None)
            .expect("read");
        let s = a.finish(reader.into_input());
        verdict = s.verdict.to_string();
        channels = s.net_channels.total;
    });
    report(
        "fabric-preflight analyze",
        bytes,
        ours,
        &format!(
            "verdict {verdict}, {channels} NET channel lines, peak RSS {:.1} MiB",
            peak_rss_mib()
        ),
    );
    if let Some(grep) = time_tool("grep", &["-c", "NCCL"], path, bytes) {
        println!(
            "{:<28} {:.2}x grep's CPU time ({:.2}x its wall clock)",
            "analysis / grep",
            ours.1.as_secs_f64() / grep.1.as_secs_f64(),
            ours.0.as_secs_f64() / grep.0.as_secs_f64()
        );
    }
    time_tool("rg", &["-c", "NCCL"], path, bytes);
}
