//! Golden outputs of every command whose output people read or parse (issue 30 §5), compared whole with files
//! under `tests/golden/`:
//!
//! - `run` (`<tree>/`): every report format (table, JSON, JUnit, Prometheus, NPD) of five recorded trees;
//! - `nccl` (`nccl/<log>/`): table and JSON of recorded NCCL logs under `testdata/nccl`;
//! - `topo` (`topo/<tree>/`): table and JSON of recorded trees;
//! - `pair --summarize` (`pair-summarize/<case>/`): every report format of ring reports under `testdata/pair`;
//! - `collective` (`collective/<case>/`): every report format of a run of the stand-in launcher and ranks under
//!   `tests/collective`, started one after another so that the lines the report cites are the same each time.
//!
//! What differs from run to run or machine to machine is redacted first (timestamps, durations, version and
//! commit, the temporary paths of a tree or a log directory), and the node name is fixed; what the input
//! decides is kept. Each directory also holds `exit-codes.txt`.
//!
//! After a change to what a command says, regenerate them all with one command and review the diff:
//!
//! ```text
//! UPDATE_GOLDEN=1 cargo test --test cli golden
//! ```

use std::path::Path;
use std::process::Command;

use fabric_preflight::probe::Kind;
use regex::Regex;

use super::util::*;

// ---- Shared: formats, fixed paths, redaction, comparison ----

/// The formats of a report of checks (`run`, `pair`, `collective`): `(format, file name)`.
const REPORT_FORMATS: &[(&str, &str)] = &[
    ("table", "table.txt"),
    ("json", "report.json"),
    ("junit", "junit.xml"),
    ("prometheus", "metrics.prom"),
    ("npd", "npd.txt"),
];

/// The formats of `nccl` and `topo`, which print their own table and JSON.
const TABLE_AND_JSON: &[(&str, &str)] = &[("table", "table.txt"), ("json", "report.json")];

/// Fixed so that the table wraps the same everywhere.
const COLUMNS: &str = "100";
const NODE_NAME: &str = "golden-node";

/// A temporary directory of fixed length (`/tmp/fpg-XXXXXXXX`), so that wrapping does not depend on where the
/// repository is checked out or what the system's temporary directory is; its path is then redacted.
fn fixed_tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("fpg-")
        .rand_bytes(8)
        .tempdir_in("/tmp")
        .unwrap()
}

/// `testdata/hosts/<tree>` copied to `/tmp/fpg-XXXXXXXX/tree`.
fn copy_of(tree: &str) -> tempfile::TempDir {
    let dir = fixed_tmp();
    let status = Command::new("cp")
        .arg("-a")
        .arg(host(tree))
        .arg(dir.path().join("tree"))
        .status()
        .unwrap();
    assert!(status.success(), "cp -a {tree}");
    dir
}

/// What varies between runs and machines, replaced by placeholders: each of `paths` by its placeholder (in
/// order: a path inside another comes first), then the timestamps, durations, version and commit `format`
/// carries.
fn redact(format: &str, text: &str, paths: &[(&Path, &str)]) -> String {
    let mut text = text.to_string();
    for (path, placeholder) in paths {
        text = text.replace(&path.display().to_string(), placeholder);
    }
    let rules: &[(&str, &str)] = match format {
        "json" => &[
            (r#""timestamp": "[^"]*""#, r#""timestamp": "<timestamp>""#),
            (r#""duration_ms": \d+"#, r#""duration_ms": 0"#),
            (r#""(version|commit)": "[^"]*""#, r#""$1": "<$1>""#),
            (COMMAND_TIME, "$1 <t> s"),
        ],
        "junit" => &[
            (r#" time="[0-9.]+""#, r#" time="0""#),
            (
                r#"<property name="version" value="[^"]*"/>"#,
                r#"<property name="version" value="<version>"/>"#,
            ),
            (COMMAND_TIME, "$1 <t> s"),
        ],
        "prometheus" => &[
            (
                r#"version="[^"]*",commit="[^"]*""#,
                r#"version="<version>",commit="<commit>""#,
            ),
            (
                r"(?m)^(fabric_preflight_run_timestamp_seconds) \d+$",
                "$1 0",
            ),
            (
                r"(?m)^(fabric_preflight_\w*duration_seconds(\{[^}]*\})?) [0-9.e+-]+$",
                "$1 0",
            ),
        ],
        "table" => &[(r"\) in [0-9.]+ m?s; profile ", ") in <duration>; profile ")],
        "npd" => &[(COMMAND_TIME, "$1 <t> s")],
        _ => &[],
    };
    for (pattern, with) in rules {
        text = Regex::new(pattern)
            .unwrap()
            .replace_all(&text, *with)
            .into_owned();
    }
    if format == "table" {
        // In a table cell: the padding after it keeps the cell's width whatever the number of digits.
        text = Regex::new(&format!("{COMMAND_TIME} *"))
            .unwrap()
            .replace_all(&text, |c: &regex::Captures| {
                let width = c[0].chars().count();
                format!("{:width$}", format!("{} <t> s", &c[1]))
            })
            .into_owned();
    }
    text
}

/// How long `collective`'s COMMAND ran (`the COMMAND exited 0 after 0.4 s`): `$1` is the words before the time.
const COMMAND_TIME: &str =
    r"((?:the COMMAND (?:exited[^,;:\n]*?|died of signal \w+)|interrupted by \w+) after) [0-9.]+ s";

/// The table's summary line (the last line with a status label, and its continuation lines) joined into one:
/// the duration it holds is redacted, and a different number of digits must not move where it wraps.
fn unwrap_summary(table: &str) -> String {
    let lines: Vec<&str> = table.lines().collect();
    let label = Regex::new(r"^(PASS|WARN|FAIL|ERROR|SKIP) ").unwrap();
    let Some(start) = lines.iter().rposition(|l| label.is_match(l)) else {
        return table.to_string();
    };
    let summary: Vec<&str> = lines[start..].iter().map(|l| l.trim()).collect();
    let mut out: String = lines[..start].iter().map(|l| format!("{l}\n")).collect();
    out.push_str(&summary.join(" "));
    out.push('\n');
    out
}

/// A report of checks in `format` as its golden holds it: the table's summary line joined, then redacted.
fn report_golden(format: &str, text: &str, paths: &[(&Path, &str)]) -> String {
    let text = if format == "table" {
        unwrap_summary(text)
    } else {
        text.to_string()
    };
    redact(format, &text, paths)
}

/// `command(format)` run for each of `formats`; `(file name, golden text)` for each, then `exit-codes.txt`.
/// `report`: the output is a report of checks (see [`report_golden`]).
fn outputs_of(
    formats: &[(&str, &str)],
    report: bool,
    paths: &[(&Path, &str)],
    mut command: impl FnMut(&str) -> Command,
) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut codes = String::new();
    for (format, file) in formats {
        let out = command(format).output().unwrap();
        let text = stdout(&out);
        let text = if report {
            report_golden(format, &text, paths)
        } else {
            redact(format, &text, paths)
        };
        files.push((file.to_string(), text));
        codes.push_str(&format!("{format} {}\n", code(&out)));
    }
    files.push(("exit-codes.txt".into(), codes));
    files
}

/// Compares outputs with their goldens, or writes them under `UPDATE_GOLDEN=1`; every stale file is named.
struct Goldens {
    update: bool,
    stale: Vec<String>,
}

impl Goldens {
    fn new() -> Self {
        Goldens {
            update: std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1"),
            stale: Vec::new(),
        }
    }

    /// `files` (file name, text) against `tests/golden/<dir>/`.
    fn check(&mut self, dir: &str, files: &[(String, String)]) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(dir);
        for (file, text) in files {
            let path = dir.join(file);
            if self.update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, text).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            if want != *text {
                let line = want
                    .lines()
                    .zip(text.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(want.lines().count().min(text.lines().count()));
                self.stale.push(format!(
                    "{}: first difference at line {}:\n  golden: {:?}\n  now:    {:?}",
                    path.display(),
                    line + 1,
                    want.lines().nth(line).unwrap_or("<end>"),
                    text.lines().nth(line).unwrap_or("<end>"),
                ));
            }
        }
    }

    fn assert_fresh(self) {
        assert!(
            self.stale.is_empty(),
            "{}\n\nIf the change is intended: UPDATE_GOLDEN=1 cargo test --test cli golden, then review the diff",
            self.stale.join("\n")
        );
    }
}

// ---- run ----

/// Varied trees: a healthy HGX, a degraded link, a GPU VM replaying its recorded library answers, a missing
/// kernel module, a DMA-BUF-only GPUDirect path. `(tree, profile)`.
const TREES: &[(&str, &str)] = &[
    ("hgx-healthy", "auto"),
    ("link-degraded-x8", "auto"),
    ("h200-vm-snapshot", "generic"),
    ("peermem-missing-proprietary", "generic"),
    ("dmabuf-only", "generic"),
];

/// Checks whose result depends on the machine running the test, not on the tree: `rdma.memlock` reads this
/// process's limits and capabilities; checks that call a vendor library (or move data through one) call this
/// machine's libraries when the tree has no recorded answers.
fn host_dependent(tree: &Path) -> Vec<&'static str> {
    let recorded = tree.join("vendor-answers.json").exists();
    fabric_preflight::probes::all()
        .iter()
        .filter(|p| {
            let calls_libraries = p.kind() != Kind::Static || !p.libraries().is_empty();
            p.id() == "rdma.memlock" || (!recorded && calls_libraries)
        })
        .map(|p| p.id())
        .collect()
}

/// `run` in every format on a copy of `tree`.
fn outputs(tree: &str, profile: &str) -> Vec<(String, String)> {
    let copy = copy_of(tree);
    let root = copy.path().join("tree");
    let skip = host_dependent(&root).join(",");
    outputs_of(REPORT_FORMATS, true, &[(&root, "<root>")], |format| {
        let mut cmd = preflight();
        cmd.env("COLUMNS", COLUMNS)
            .args(["run", "--color", "never", "--node-name", NODE_NAME])
            .args(["--profile", profile, "--format", format, "--skip", &skip])
            .arg("--root")
            .arg(&root);
        cmd
    })
}

#[test]
fn golden_outputs_match() {
    let mut goldens = Goldens::new();
    for (tree, profile) in TREES {
        goldens.check(tree, &outputs(tree, profile));
    }
    goldens.assert_fresh();
}

/// The same tree twice gives the same goldens: nothing left unredacted varies (order, time, paths).
#[test]
fn golden_outputs_are_deterministic() {
    let (tree, profile) = TREES[0];
    assert_eq!(outputs(tree, profile), outputs(tree, profile));
}

// ---- nccl ----

/// Recorded logs of `testdata/nccl`, one of each kind: IB with GPUDirect RDMA on every channel, a Socket
/// fallback on one node of two, OFI (aws-ofi-nccl, EFA) with GDRDMA, errors NCCL recovered from (a net
/// plugin's probe chain before each communicator's init completed), and a failure after init.
const NCCL_LOGS: &[&str] = &[
    "v2.18-nvml-index-cumem-ib-gdrdma",
    "mixed-socket-one-bad-node",
    "ofi-aws-libfabric-gdrdma",
    "recovered-several-comms-v2.28-split",
    "fatal-warn-after-init-ib-gdrdma",
];

/// `nccl LOG.log` in each format, run in `testdata/nccl` so that the locations it cites are the file's name.
fn nccl_outputs(log: &str) -> Vec<(String, String)> {
    outputs_of(TABLE_AND_JSON, false, &[], |format| {
        let mut cmd = preflight();
        cmd.env("COLUMNS", COLUMNS)
            .current_dir(testdata("nccl"))
            .args(["nccl", "--format", format])
            .arg(format!("{log}.log"));
        cmd
    })
}

#[test]
fn golden_nccl_outputs_match() {
    let mut goldens = Goldens::new();
    for log in NCCL_LOGS {
        goldens.check(&format!("nccl/{log}"), &nccl_outputs(log));
    }
    goldens.assert_fresh();
}

// ---- topo ----

/// An HGX H100 (two NUMA nodes, a NIC and NVMe beside each GPU), a GB200 tray (GPUs and NICs on PCI domains
/// of their own, storage NICs), and an HGX whose two links train at x8.
const TOPO_TREES: &[&str] = &["hgx-healthy", "gb200-tray-ib", "link-degraded-x8"];

#[test]
fn golden_topo_outputs_match() {
    let mut goldens = Goldens::new();
    for tree in TOPO_TREES {
        let root = host(tree);
        let files = outputs_of(TABLE_AND_JSON, false, &[(&root, "<root>")], |format| {
            let mut cmd = preflight();
            cmd.env("COLUMNS", COLUMNS)
                .args(["topo", "--format", format, "--root"])
                .arg(&root);
            cmd
        });
        goldens.check(&format!("topo/{tree}"), &files);
    }
    goldens.assert_fresh();
}

// ---- pair --summarize ----

/// `(case, reports)`: the JSON reports of `pair --ring` nodes under `testdata/pair` (see its README), given to
/// `pair --summarize` by their names. A ring of three on a host without RDMA devices (every link skipped); the
/// same ring with gpu-a02 never started (its neighbours name it); that with its missing report passed too;
/// one node's report missing and another's cut short.
const PAIR_CASES: &[(&str, &[&str])] = &[
    (
        "ring-no-rdma",
        &[
            "ring-no-rdma-0.json",
            "ring-no-rdma-1.json",
            "ring-no-rdma-2.json",
        ],
    ),
    (
        "ring-gpu-a02-down",
        &["ring-gpu-a02-down-0.json", "ring-gpu-a02-down-2.json"],
    ),
    (
        "ring-gpu-a02-down-report-missing",
        &[
            "ring-gpu-a02-down-0.json",
            "ring-gpu-a02-down-2.json",
            "missing.json",
        ],
    ),
    (
        "reports-missing-and-truncated",
        &[
            "ring-no-rdma-0.json",
            "missing.json",
            "ring-no-rdma-2.json",
            "truncated.json",
        ],
    ),
];

#[test]
fn golden_pair_summarize_outputs_match() {
    let mut goldens = Goldens::new();
    for (case, reports) in PAIR_CASES {
        let files = outputs_of(REPORT_FORMATS, true, &[], |format| {
            let mut cmd = preflight();
            cmd.env("COLUMNS", COLUMNS)
                .current_dir(testdata("pair"))
                .args([
                    "pair",
                    "--color",
                    "never",
                    "--format",
                    format,
                    "--summarize",
                ])
                .args(*reports);
            cmd
        });
        goldens.check(&format!("pair-summarize/{case}"), &files);
    }
    goldens.assert_fresh();
}

// ---- collective ----

/// `(case, STANDIN_SCENARIO, profile)` of the stand-ins `tests/cli/collective.rs` drives: a healthy 2x8 run
/// over NET/IB/GDRDMA judged by the HGX profile, and the same job fallen back to NET/Socket under the generic
/// profile (no busbw floor: the transport fails it).
const COLLECTIVE_CASES: &[(&str, &str, &str)] = &[
    ("healthy", "healthy", "hgx-h100-ib"),
    ("socket", "socket", "generic"),
];

/// `collective` once, the table on stdout and every other format through `--output`, with `--root` hgx-healthy
/// (this host is node 0 of the stand-in job, so its ranks' rails are judged against that tree; the table
/// names the root only in its summary line, which is unwrapped), the logs in a temporary directory of fixed
/// length, the stand-in ranks started one after another.
fn collective_outputs(scenario: &str, profile: &str) -> Vec<(String, String)> {
    let tmp = fixed_tmp();
    let (root, logs, out) = (
        host("hgx-healthy"),
        tmp.path().join("logs"),
        tmp.path().join("out"),
    );
    std::fs::create_dir(&out).unwrap();
    let standins = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/collective");
    let mut cmd = preflight();
    cmd.env(
        "PATH",
        format!(
            "{}:{}",
            standins.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )
    .env("COLUMNS", COLUMNS)
    .env("STANDIN_SCENARIO", scenario)
    .env("STANDIN_HOSTS", "hgx-healthy,gpu-a02")
    .env("STANDIN_SERIAL", "1")
    .args(["collective", "--color", "never", "--format", "table"])
    .args(["--profile", profile, "--root"])
    .arg(&root)
    .arg("--log-dir")
    .arg(&logs);
    for (format, file) in &REPORT_FORMATS[1..] {
        cmd.arg("--output")
            .arg(format!("{format}={}", out.join(file).display()));
    }
    cmd.args(["--", "launch", "--label", "all_reduce_perf"])
        .args(["-b", "8M", "-e", "4G", "-f", "2", "-g", "1"]);
    let ran = cmd.output().unwrap();
    let paths: &[(&Path, &str)] = &[(&root, "<root>"), (&logs, "<logs>")];
    let mut files = Vec::new();
    for (format, file) in REPORT_FORMATS {
        let text = if *format == "table" {
            stdout(&ran)
        } else {
            std::fs::read_to_string(out.join(file))
                .unwrap_or_else(|e| panic!("--output {format}: {e}; stderr: {}", stderr(&ran)))
        };
        files.push((file.to_string(), report_golden(format, &text, paths)));
    }
    files.push(("exit-codes.txt".into(), format!("table {}\n", code(&ran))));
    files
}

#[test]
fn golden_collective_outputs_match() {
    let mut goldens = Goldens::new();
    for (case, scenario, profile) in COLLECTIVE_CASES {
        goldens.check(
            &format!("collective/{case}"),
            &collective_outputs(scenario, profile),
        );
    }
    goldens.assert_fresh();
}

/// The stand-in ranks started one after another cite the same lines of the launcher's output each time, and
/// nothing else unredacted varies.
#[test]
fn golden_collective_outputs_are_deterministic() {
    let (_, scenario, profile) = COLLECTIVE_CASES[1];
    assert_eq!(
        collective_outputs(scenario, profile),
        collective_outputs(scenario, profile)
    );
}

#[test]
fn redaction_keeps_what_the_tree_decides() {
    let root = Path::new("/tmp/fpg-12345678/tree");
    let paths: &[(&Path, &str)] = &[(root, "<root>")];
    let json = "  \"timestamp\": \"2026-12-01T14:31:42Z\",\n  \"duration_ms\": 749,\n  \"version\": \"0.1.0\",\n  \
                \"root\": \"/tmp/fpg-12345678/tree\",\n  \"summary\": \"firmware 0.1.0\"\n";
    assert_eq!(
        redact("json", json, paths),
        "  \"timestamp\": \"<timestamp>\",\n  \"duration_ms\": 0,\n  \"version\": \"<version>\",\n  \
         \"root\": \"<root>\",\n  \"summary\": \"firmware 0.1.0\"\n"
    );
    assert_eq!(
        redact(
            "table",
            "FAIL  6 checks (1 fail) in 1.2 s; profile p; host h, root /tmp/fpg-12345678/tree\n",
            paths
        ),
        "FAIL  6 checks (1 fail) in <duration>; profile p; host h, root <root>\n"
    );
    assert_eq!(
        unwrap_summary(
            "table\n\nprofile auto → p: x\n  y\nFAIL  6 checks in 12 ms;\n      profile p\n"
        ),
        "table\n\nprofile auto → p: x\n  y\nFAIL  6 checks in 12 ms; profile p\n"
    );
    // The COMMAND's time: the cell keeps its width whatever the number of digits; a busbw or a time the job
    // printed is the input's.
    for secs in ["0.4", "12.3"] {
        let cell = format!(
            "┆ the COMMAND exited 0 after {secs} s{:1$}│\n",
            "",
            9 - secs.len()
        );
        assert_eq!(
            redact("table", &cell, &[]),
            "┆ the COMMAND exited 0 after <t> s      │\n"
        );
    }
    assert_eq!(
        redact(
            "json",
            "\"the COMMAND exited with status 1 after 3.0 s\", \"time 179475.5 us, busbw 44.87 GB/s after 2 s\"",
            &[]
        ),
        "\"the COMMAND exited with status 1 after <t> s\", \"time 179475.5 us, busbw 44.87 GB/s after 2 s\""
    );
}
