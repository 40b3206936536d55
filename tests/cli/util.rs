//! Helpers to run the built binary the way CI and SREs do: a cleared environment, no colour.

#![allow(dead_code)] // each test module uses a different subset of these helpers

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use fabric_preflight::commands::findings::{codes_of, registry};
use serde_json::Value;

pub use fabric_preflight::exit::Exit;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_fabric-preflight")
}

/// `testdata/hosts/<scenario>`.
pub fn host(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/hosts")
        .join(scenario)
}

pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

/// The binary with a cleared environment (only PATH kept), so no NCCL_* or NO_COLOR leaks in.
pub fn preflight() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd
}

/// `pair --listen` with `option` (`--flag=value`) added: for the tests that an option's bad values are usage
/// errors, which `pair` must reject before it opens a port or a device.
pub fn pair_listening_with(option: &str) -> Output {
    preflight()
        .args(["pair", "--listen", "19999", "--token", "t", option])
        .output()
        .unwrap()
}

pub fn code(out: &Output) -> u8 {
    out.status.code().expect("exited normally") as u8
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON reports and the schema each must satisfy (`schemas/<name>.schema.json`, shipped for consumers).
#[derive(Debug, Clone, Copy)]
pub enum Schema {
    Run,
    Nccl,
    Topo,
    Isolate,
}

impl Schema {
    pub const ALL: [Schema; 4] = [Schema::Run, Schema::Nccl, Schema::Topo, Schema::Isolate];

    pub fn path(self) -> PathBuf {
        let name = match self {
            Schema::Run => "run",
            Schema::Nccl => "nccl",
            Schema::Topo => "topo",
            Schema::Isolate => "isolate",
        };
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("schemas/{name}.schema.json"))
    }

    pub fn document(self) -> Value {
        let text = std::fs::read_to_string(self.path()).expect("schema file");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{self:?} schema: {e}"))
    }

    fn validator(self) -> &'static jsonschema::Validator {
        static COMPILED: [OnceLock<jsonschema::Validator>; 4] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        COMPILED[self as usize].get_or_init(|| {
            jsonschema::draft202012::options()
                .should_validate_formats(true)
                .build(&self.document())
                .unwrap_or_else(|e| panic!("{self:?} schema does not compile: {e}"))
        })
    }
}

/// What is wrong with the findings of one result, if anything.
pub fn coding_problem(check: &Value) -> Option<String> {
    let id = check["id"].as_str().unwrap();
    let status = check["status"].as_str().unwrap();
    if status == "pass" {
        return None;
    }
    let findings = check["findings"].as_array().cloned().unwrap_or_default();
    let own = codes_of(id);
    let registered = registry();
    for f in &findings {
        let code = f["code"].as_str().unwrap();
        if !own.contains(&code) {
            return Some(format!("{code} is not a code of {id}"));
        }
        let step = registered
            .iter()
            .find(|r| r.code.code == code)
            .and_then(|r| r.code.step)
            .map(|s| s.as_str());
        if f["step"].as_str() != step {
            return Some(format!("{code} carries step {} ≠ {step:?}", f["step"]));
        }
    }
    if !findings.iter().any(|f| f["status"] == status) {
        return Some(format!("no finding of status {status}: {findings:?}"));
    }
    None
}

/// Every result other than a pass in a report of checks (`run`, `pair`, `collective`) carries a registered code
/// of its own check with the status that decided it (issue 30 §4); panics naming each that does not.
pub fn assert_coded(report: &Value) {
    let problems: Vec<String> = report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            coding_problem(c)
                .map(|p| format!("{} {}: {} — {p}", c["id"], c["status"], c["summary"]))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "uncoded results:\n{}",
        problems.join("\n")
    );
}

/// Every node `isolate` did not find healthy carries a registered `isolate` code and that code's step; a
/// healthy one carries none.
pub fn assert_isolate_coded(report: &Value) {
    let own = codes_of("isolate");
    let registered = registry();
    for node in report["nodes"].as_array().into_iter().flatten() {
        let code = node["code"].as_str();
        assert_eq!(node["verdict"] == "healthy", code.is_none(), "{node:#}");
        let Some(code) = code else { continue };
        assert!(
            own.contains(&code),
            "{code} is not an isolate code: {node:#}"
        );
        let step = registered
            .iter()
            .find(|r| r.code.code == code)
            .and_then(|r| r.code.step)
            .map(|s| s.as_str());
        assert_eq!(node["step"].as_str(), step, "{node:#}");
    }
}

/// Parses a JSON report and checks it against its schema (and a report of checks or verdicts for its codes); panics naming
/// the text and every violation.
pub fn json(schema: Schema, bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    let value: Value =
        serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let errors: Vec<String> = schema
        .validator()
        .iter_errors(&value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "report breaks {}:\n{}\n{text}",
        schema.path().display(),
        errors.join("\n")
    );
    match schema {
        // Recorded reports of older versions (testdata/device/) predate some codes: held to their schema only.
        Schema::Run if value["schema_version"] == fabric_preflight::report::SCHEMA_VERSION => {
            assert_coded(&value)
        }
        Schema::Run => {}
        Schema::Isolate => assert_isolate_coded(&value),
        Schema::Nccl | Schema::Topo => {}
    }
    value
}

/// [`json`] of a command's stdout; its stderr is shown when stdout is not JSON.
pub fn json_out(schema: Schema, out: &Output) -> Value {
    if serde_json::from_slice::<Value>(&out.stdout).is_err() {
        panic!(
            "stdout is not JSON: {}\nstderr: {}",
            stdout(out),
            stderr(out)
        );
    }
    json(schema, &out.stdout)
}

/// `run --root <root> --profile <profile> --format json --color never <extra>` → (exit code, report).
pub fn run_json(root: &Path, profile: &str, extra: &[&str]) -> (u8, Value) {
    let out = preflight()
        .args([
            "run",
            "--format",
            "json",
            "--color",
            "never",
            "--profile",
            profile,
            "--root",
        ])
        .arg(root)
        .args(extra)
        .output()
        .expect("binary runs");
    (code(&out), json_out(Schema::Run, &out))
}

/// `(id, subject, status)` of every result, subject "" when none.
pub fn verdicts(report: &Value) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .expect("checks array")
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or_default().to_string(),
                c["subject"].as_str().unwrap_or_default().to_string(),
                c["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Status of the one result of `id` (panics when there is not exactly one).
pub fn status_of(report: &Value, id: &str) -> String {
    let all: Vec<_> = verdicts(report)
        .into_iter()
        .filter(|(i, _, _)| i == id)
        .collect();
    assert_eq!(all.len(), 1, "expected one result for {id}, got {all:?}");
    all[0].2.clone()
}

/// The result object of `id` (first one).
pub fn result_of<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// Writes `files` (host path → content) under a fresh temp dir: a tiny recorded tree for one test.
pub fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, content) in files {
        let full = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(full.parent().expect("has parent")).expect("mkdir");
        std::fs::write(full, content).expect("write");
    }
    dir
}

/// Every recorded tree under testdata/hosts.
pub fn trees() -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(host(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    all.sort();
    assert!(all.len() >= 10, "{all:?}");
    all
}

/// Every result of check `id` in a `run` report.
pub fn results<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["id"] == id)
        .collect()
}

/// A writable copy of `testdata/hosts/<scenario>` (symlinks kept), for tests that change a file or two.
pub fn copy_scenario(scenario: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", host(scenario).display()))
        .arg(dir.path())
        .status()
        .expect("cp runs");
    assert!(status.success());
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}
