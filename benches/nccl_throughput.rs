//! Throughput of the NCCL log analysis on one core, against `grep -c ' via '` (and `rg -c` when installed) on
//! the same file. `cargo bench --bench nccl_throughput`; size with NCCL_BENCH_MB (default 512).
//!
//! The generated log is what a large job's combined output looks like: mostly application noise (training
//! progress, Python warnings), NCCL INFO init lines, topology dumps, and channel lines from many ranks.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fabric_preflight::nccl::Analyzer;

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

/// `noise_pct` percent application lines, the rest NCCL lines (init, topology, channels).
fn generate(path: &Path, bytes: u64, noise_pct: u64) -> std::io::Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut written = 0u64;
    let mut line = String::with_capacity(256);
    while written < bytes {
        line.clear();
        let rank = rng.below(1024);
        let host = rank / 8;
        let dev = rank % 8;
        let pid = 30000 + rank;
        // Noise picks one of the three noise shapes, NCCL one of the four NCCL shapes.
        let roll = if rng.below(100) < noise_pct {
            rng.below(95)
        } else {
            95 + rng.below(5)
        };
        use std::fmt::Write as _;
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
            _ => writeln!(
                line,
                "gpu-a{host:03}:{pid}:{} [{dev}] NCCL INFO Channel {:02}/0 : {rank}[{dev}] -> {}[{dev}] [send] via NET/IB/{}/GDRDMA",
                pid + 91,
                rng.below(32),
                (rank + 8) % 1024,
                dev / 2
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

/// Best of `runs` wall-clock times of `f`.
fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn time_tool(program: &str, args: &[&str], path: &Path, bytes: u64) {
    let probe = Command::new(program).arg("--version").output();
    if probe.is_err() {
        println!("{program:<28} not installed");
        return;
    }
    let mut matches = String::new();
    let d = best_of(3, || {
        let out = Command::new(program)
            .args(args)
            .arg(path)
            .output()
            .expect("tool runs");
        matches = String::from_utf8_lossy(&out.stdout).trim().to_string();
    });
    println!(
        "{:<28} {:>8.0} MB/s  ({:.3} s, count {matches})",
        format!("{program} {}", args.join(" ")),
        mb_per_s(bytes, d),
        d.as_secs_f64()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; accept and ignore libtest-style arguments.
    let mb: u64 = std::env::var("NCCL_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let dir = tempfile::tempdir().expect("temp dir");
    for (label, noise_pct) in [("95% application noise", 95), ("all NCCL lines", 0)] {
        let path = dir.path().join(format!("nccl-bench-{noise_pct}.log"));
        let t = Instant::now();
        let bytes = generate(&path, mb * 1_000_000, noise_pct).expect("generate log");
        println!(
            "\n{label}: generated {:.0} MB in {:.1} s",
            bytes as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );
        bench_one(&path, bytes);
        std::fs::remove_file(&path).ok();
    }
}

fn bench_one(path: &Path, bytes: u64) {
    // Warm the page cache so every tool reads from memory.
    let _ = std::fs::read(path).map(|b| b.len());
    let mut verdict = String::new();
    let mut channels = 0;
    let d = best_of(3, || {
        let mut a = Analyzer::new();
        a.read("bench", File::open(path).expect("open"), None)
            .expect("read");
        let s = a.finish();
        verdict = s.verdict.to_string();
        channels = s.net_channels.total;
    });
    println!(
        "{:<28} {:>8.0} MB/s  ({:.3} s, verdict {verdict}, {channels} NET channel lines)",
        "fabric-preflight analyze",
        mb_per_s(bytes, d),
        d.as_secs_f64()
    );
    time_tool("grep", &["-c", " via "], path, bytes);
    time_tool("rg", &["-c", " via "], path, bytes);
}
