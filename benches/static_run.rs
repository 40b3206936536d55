//! Times the full static run and `topo` on the 8-GPU/8-NIC recorded tree, through the library and through the
//! built binary, next to a reference: `find | cat` of every file of the same tree (the I/O floor).
//!
//! `cargo bench --bench static_run` (harness = false: plain timing, median and min of repeated runs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fabric_preflight::commands::run::{execute, prepare};
use fabric_preflight::commands::topo::{port_roles, render_table};
use fabric_preflight::host::Host;
use fabric_preflight::probe::{Inputs, Kind};
use fabric_preflight::rules::topology::PciTree;

const RUNS: usize = 30;
/// Issue 18's target: the full static run, end to end, in at most this share of the reference's time.
const TARGET_SHARE: f64 = 0.6;

/// `BENCH_TREE=gb200-tray-ib cargo bench --bench static_run` times another recorded tree (default `hgx-healthy`).
fn tree() -> PathBuf {
    let name = std::env::var("BENCH_TREE").unwrap_or_else(|_| "hgx-healthy".into());
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/hosts")
        .join(name)
}

fn static_ids() -> Vec<String> {
    fabric_preflight::probes::all()
        .iter()
        .filter(|p| p.kind() == Kind::Static)
        .map(|p| p.id().to_string())
        .collect()
}

/// (median, min) of `RUNS` runs of `f` and of `g`, taken in turns, after one warm-up of each.
fn time_pair(
    mut f: impl FnMut(),
    mut g: impl FnMut(),
) -> ((Duration, Duration), (Duration, Duration)) {
    f();
    g();
    let (mut fs, mut gs) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let t = Instant::now();
        f();
        fs.push(t.elapsed());
        let t = Instant::now();
        g();
        gs.push(t.elapsed());
    }
    (stats(fs), stats(gs))
}

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[0])
}

/// (median, min) of `RUNS` runs after one warm-up.
fn time(mut f: impl FnMut()) -> (Duration, Duration) {
    f();
    stats(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn report(name: &str, (median, min): (Duration, Duration)) {
    println!(
        "{name:<58} median {:>8.2} ms   min {:>8.2} ms",
        median.as_secs_f64() * 1e3,
        min.as_secs_f64() * 1e3
    );
}

/// Runs the built binary; exit 0 (pass) or 1 (a check failed) are both real runs, anything else is not.
fn run_binary(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabric-preflight"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("binary runs");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{args:?}: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main() {
    let root = tree();
    let root_str = root.to_str().expect("UTF-8 path");
    let ids = static_ids();
    let only = ids.join(",");
    println!("tree: {}", root.display());
    println!("static checks ({}): {only}\n", ids.len());

    let library_run = time(|| {
        let plan =
            prepare(Some(&root), "generic", &ids, &[], 120.0, Inputs::default()).expect("plan");
        let executed = execute(plan);
        assert!(!executed.report.checks.is_empty());
    });
    report("full static run, library (prepare + execute)", library_run);

    // The binary and the reference alternate, run by run, so the machine's load weighs on both alike.
    let (binary_run, reference) = time_pair(
        || {
            run_binary(&[
                "run",
                "--profile",
                "generic",
                "--root",
                root_str,
                "--only",
                &only,
                "--format",
                "json",
            ])
        },
        // Reference: reading every file of the tree once with find + cat (no parsing, no judgement).
        || {
            let status = Command::new("sh")
                .arg("-c")
                .arg("find sys proc dev -type f -exec cat {} + > /dev/null")
                .current_dir(&root)
                .status()
                .expect("sh runs");
            assert!(status.success());
        },
    );
    report(
        "full static run, binary end to end (--format json)",
        binary_run,
    );
    report(
        "reference: find sys proc dev -type f -exec cat {} +",
        reference,
    );

    report(
        "topo, library (PciTree::read + port roles + table)",
        time(|| {
            // A fresh host each time: a host builds its PCIe tree once and shares it.
            let host = Host::at(&root).expect("tree");
            let t = PciTree::read(&host).expect("tree");
            assert!(!render_table(&t, &port_roles(&host), 80).is_empty());
        }),
    );
    report(
        "topo, binary end to end",
        time(|| run_binary(&["topo", "--root", root_str])),
    );

    let share = binary_run.0.as_secs_f64() / reference.0.as_secs_f64();
    let verdict = if share <= TARGET_SHARE {
        "meets"
    } else {
        "MISSES"
    };
    println!(
        "\nfull static run end to end: {:.1} ms median, {share:.2} of the reference's {:.1} ms: {verdict} the {TARGET_SHARE} target",
        binary_run.0.as_secs_f64() * 1e3,
        reference.0.as_secs_f64() * 1e3,
    );
}
