//! Test helper: run one probe against a recorded tree under `testdata/hosts/` with a built-in profile.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::host::Host;
use crate::probe::{CheckResult, Context, Inputs, Probe};
use crate::profile::Profile;
use crate::recording::Answers;

pub fn run_on(probe: &dyn Probe, scenario: &str, profile: &str) -> Vec<CheckResult> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/hosts")
        .join(scenario);
    run_on_root(probe, &root, profile)
}

/// Same, on any tree (a modified copy in a temp dir).
pub fn run_on_root(probe: &dyn Probe, root: &Path, profile: &str) -> Vec<CheckResult> {
    let profile = crate::profile::load(profile, &crate::probes::ids()).expect("built-in profile");
    run_with(probe, root, &profile, &Inputs::default())
}

/// Runs `probe` on the tree at `root` with a hand-made profile and inputs (environment, logs).
pub fn run_with(
    probe: &dyn Probe,
    root: &Path,
    profile: &Profile,
    inputs: &Inputs,
) -> Vec<CheckResult> {
    let host = Host::at(root).expect("tree exists");
    let settings = profile.settings(probe.id());
    let answers = Answers::for_host(&host).expect("answers");
    let cx = Context {
        host: &host,
        profile,
        settings: &settings,
        inputs,
        answers: &answers,
        deadline: Instant::now() + Duration::from_secs(10),
        scratch: None,
    };
    probe.run(&cx)
}

/// `(subject, status)` of each result, for compact assertions.
pub fn verdicts(results: &[CheckResult]) -> Vec<(String, crate::probe::Status)> {
    results
        .iter()
        .map(|r| (r.subject.clone().unwrap_or_default(), r.status))
        .collect()
}

/// A writable copy of a recorded tree (symlinks kept), for tests that change one file.
pub fn copy_scenario(scenario: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/hosts")
        .join(scenario);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(dir.path())
        .status()
        .expect("cp runs");
    assert!(status.success());
    dir
}

/// A copy of `scenario` with host file `path` made unreadable (a symlink to itself: ELOOP, for root too) or,
/// with `text`, holding it instead.
pub fn damaged_copy(scenario: &str, path: &str, text: Option<&str>) -> tempfile::TempDir {
    let dir = copy_scenario(scenario);
    let real = crate::host::Host::at(dir.path())
        .expect("tree")
        .resolve(path)
        .expect("path in the tree");
    std::fs::remove_file(&real).expect("a file");
    match text {
        Some(t) => std::fs::write(&real, t).expect("written"),
        None => {
            std::os::unix::fs::symlink(real.file_name().expect("a name"), &real).expect("linked")
        }
    }
    dir
}
