//! Golden outputs: every report format (table, JSON, JUnit, Prometheus, NPD) of five recorded trees, compared
//! whole with `tests/golden/<tree>/`. What differs from run to run or machine to machine is redacted first
//! (timestamps, durations, version and commit, the path of the tree), and the node name is fixed.
//!
//! After a change to what a report says, regenerate them all with one command and review the diff:
//!
//! ```text
//! UPDATE_GOLDEN=1 cargo test --test cli golden
//! ```

use std::path::{Path, PathBuf};

use fabric_preflight::probe::Kind;
use regex::Regex;

use super::util::*;

/// Varied trees: a healthy HGX, a degraded link, a GPU VM replaying its recorded library answers, a missing
/// kernel module, a DMA-BUF-only GPUDirect path. `(tree, profile)`.
const TREES: &[(&str, &str)] = &[
    ("hgx-healthy", "auto"),
    ("link-degraded-x8", "auto"),
    ("h200-vm-snapshot", "generic"),
    ("peermem-missing-proprietary", "generic"),
    ("dmabuf-only", "generic"),
];

/// `(format, file name)`.
const FORMATS: &[(&str, &str)] = &[
    ("table", "table.txt"),
    ("json", "report.json"),
    ("junit", "junit.xml"),
    ("prometheus", "metrics.prom"),
    ("npd", "npd.txt"),
];

/// Fixed so that the table wraps the same everywhere.
const COLUMNS: &str = "100";
const NODE_NAME: &str = "golden-node";

fn golden_dir(tree: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(tree)
}

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

/// The tree copied to a path of fixed length (`/tmp/fpg-XXXXXXXX/tree`), so that wrapping does not depend on
/// where the repository is checked out; the path is then redacted.
fn copy_of(tree: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("fpg-")
        .rand_bytes(8)
        .tempdir_in("/tmp")
        .unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(host(tree))
        .arg(dir.path().join("tree"))
        .status()
        .unwrap();
    assert!(status.success(), "cp -a {tree}");
    dir
}

/// What varies between runs and machines, replaced by placeholders.
fn redact(format: &str, text: &str, root: &Path) -> String {
    let mut text = text.replace(&root.display().to_string(), "<root>");
    let rules: &[(&str, &str)] = match format {
        "json" => &[
            (r#""timestamp": "[^"]*""#, r#""timestamp": "<timestamp>""#),
            (r#""duration_ms": \d+"#, r#""duration_ms": 0"#),
            (r#""(version|commit)": "[^"]*""#, r#""$1": "<$1>""#),
        ],
        "junit" => &[
            (r#" time="[0-9.]+""#, r#" time="0""#),
            (
                r#"<property name="version" value="[^"]*"/>"#,
                r#"<property name="version" value="<version>"/>"#,
            ),
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
        _ => &[],
    };
    for (pattern, with) in rules {
        text = Regex::new(pattern)
            .unwrap()
            .replace_all(&text, *with)
            .into_owned();
    }
    text
}

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

/// Runs every format on `tree`; `(file name, text)` for each, plus the exit codes.
fn outputs(tree: &str, profile: &str) -> Vec<(String, String)> {
    let copy = copy_of(tree);
    let root = copy.path().join("tree");
    let skip = host_dependent(&root).join(",");
    let mut files = Vec::new();
    let mut codes = String::new();
    for (format, file) in FORMATS {
        let out = preflight()
            .env("COLUMNS", COLUMNS)
            .args(["run", "--color", "never", "--node-name", NODE_NAME])
            .args(["--profile", profile, "--format", format, "--skip", &skip])
            .arg("--root")
            .arg(&root)
            .output()
            .unwrap();
        let mut text = stdout(&out);
        if *format == "table" {
            text = unwrap_summary(&text);
        }
        files.push((file.to_string(), redact(format, &text, &root)));
        codes.push_str(&format!("{format} {}\n", code(&out)));
    }
    files.push(("exit-codes.txt".into(), codes));
    files
}

#[test]
fn golden_outputs_match() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (tree, profile) in TREES {
        let dir = golden_dir(tree);
        for (file, text) in outputs(tree, profile) {
            let path = dir.join(&file);
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &text).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            if want != text {
                let line = want
                    .lines()
                    .zip(text.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(want.lines().count().min(text.lines().count()));
                stale.push(format!(
                    "{}: first difference at line {}:\n  golden: {:?}\n  now:    {:?}",
                    path.display(),
                    line + 1,
                    want.lines().nth(line).unwrap_or("<end>"),
                    text.lines().nth(line).unwrap_or("<end>"),
                ));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "{}\n\nIf the change is intended: UPDATE_GOLDEN=1 cargo test --test cli golden, then review the diff",
        stale.join("\n")
    );
}

/// The same tree twice gives the same goldens: nothing left unredacted varies (order, time, paths).
#[test]
fn golden_outputs_are_deterministic() {
    let (tree, profile) = TREES[0];
    assert_eq!(outputs(tree, profile), outputs(tree, profile));
}

#[test]
fn redaction_keeps_what_the_tree_decides() {
    let root = Path::new("/tmp/fpg-12345678/tree");
    let json = "  \"timestamp\": \"2026-12-01T14:31:42Z\",\n  \"duration_ms\": 749,\n  \"version\": \"0.1.0\",\n  \
                \"root\": \"/tmp/fpg-12345678/tree\",\n  \"summary\": \"firmware 0.1.0\"\n";
    assert_eq!(
        redact("json", json, root),
        "  \"timestamp\": \"<timestamp>\",\n  \"duration_ms\": 0,\n  \"version\": \"<version>\",\n  \
         \"root\": \"<root>\",\n  \"summary\": \"firmware 0.1.0\"\n"
    );
    assert_eq!(
        redact(
            "table",
            "FAIL  6 checks (1 fail) in 1.2 s; profile p; host h, root /tmp/fpg-12345678/tree\n",
            root
        ),
        "FAIL  6 checks (1 fail) in <duration>; profile p; host h, root <root>\n"
    );
    assert_eq!(
        unwrap_summary(
            "table\n\nprofile auto → p: x\n  y\nFAIL  6 checks in 12 ms;\n      profile p\n"
        ),
        "table\n\nprofile auto → p: x\n  y\nFAIL  6 checks in 12 ms; profile p\n"
    );
}
