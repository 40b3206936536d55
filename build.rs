//! Stamps the binary with the git commit it was built from, for `--version` and the reports. A build from a
//! source tarball (no `.git`, or no git) gets `unknown`, or `FABRIC_PREFLIGHT_COMMIT` when the packager sets it.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=FABRIC_PREFLIGHT_COMMIT");
    let given = std::env::var("FABRIC_PREFLIGHT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty());
    let (commit, detail) = match given {
        Some(commit) => (commit.clone(), commit),
        None => from_git().unwrap_or_else(|| ("unknown".into(), "commit unknown".into())),
    };
    println!("cargo:rustc-env=FABRIC_PREFLIGHT_COMMIT={commit}");
    println!("cargo:rustc-env=FABRIC_PREFLIGHT_BUILD={detail}");
}

/// (`a1b2c3d4e5f6`, `a1b2c3d4e5f6 2026-12-01`): the commit, and the commit with its date.
fn from_git() -> Option<(String, String)> {
    // HEAD moves on checkout, its log on every commit. Both live in the git dir, which is not `.git/` in a
    // worktree. A path that does not exist would make cargo rerun this script on every build.
    for file in ["HEAD", "logs/HEAD"] {
        if let Some(path) = git(&["rev-parse", "--git-path", file]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
    let detail = match git(&["log", "-1", "--format=%cs", "HEAD"]) {
        Some(date) => format!("{hash} {date}"),
        None => hash.clone(),
    };
    Some((hash, detail))
}
