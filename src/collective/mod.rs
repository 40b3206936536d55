//! `collective`: an NCCL job run through the site's own launcher, judged from what it printed. [`launch`]
//! starts and bounds the COMMAND; [`nccl_tests`] reads nccl-tests' result table (the torch workload prints the
//! same); [`ranks`] attributes every NCCL line to its process and rank; the transport comes from the shared
//! NCCL analysis (`crate::nccl`); [`judge`] turns it all into results in `run`'s report format.

pub(crate) mod judge;
pub(crate) mod launch;
pub(crate) mod nccl_tests;
mod paths;
pub(crate) mod ranks;
pub(crate) mod variant;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::input::{self, Accept, InputError};
use crate::nccl::{self, Summary};

/// The built-in workload (`--workload torch`), written into the log directory at run time.
pub const WORKLOAD_TORCH: &str = include_str!("workload_torch.py");
/// Its file name there.
pub const WORKLOAD_TORCH_FILE: &str = "workload_torch.py";
/// The NCCL subsystems the verdict needs: init and selection, the channel lines, the rings, the environment.
pub const NCCL_SUBSYS: [&str; 4] = ["INIT", "NET", "GRAPH", "ENV"];
/// Per-process NCCL log files (`%h` host, `%p` pid, expanded by NCCL).
pub const DEBUG_FILE_PATTERN: &str = "nccl.%h.%p.log";
/// The COMMAND's merged stdout and stderr.
pub const OUTPUT_FILE: &str = "output.log";
/// Longest line looked at; longer ones are cut (NCCL's own lines are at most 1023 bytes).
const MAX_LINE_BYTES: usize = 64 * 1024;

/// The environment a run adds on top of the user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclEnv {
    pub set: Vec<(String, String)>,
    /// NCCL_DEBUG_FILE as the ranks will see it (the user's own, or ours in the log directory).
    pub debug_file: String,
    /// What was changed from the user's settings, and why.
    pub notes: Vec<String>,
}

/// NCCL_DEBUG=INFO (TRACE kept), NCCL_DEBUG_SUBSYS with [`NCCL_SUBSYS`] added to the user's own, and
/// NCCL_DEBUG_FILE per process in `log_dir` unless the user set one (then it is read where it points).
pub fn nccl_env(user: &BTreeMap<String, String>, log_dir: &Path) -> NcclEnv {
    let mut set = Vec::new();
    let mut notes = Vec::new();
    match user
        .get("NCCL_DEBUG")
        .map(|v| v.trim().to_ascii_uppercase())
    {
        Some(level) if level == "INFO" || level == "TRACE" => {}
        other => {
            if let Some(level) = other.filter(|l| !l.is_empty()) {
                notes.push(format!(
                    "NCCL_DEBUG={level} raised to INFO: the transport is proven from INFO lines"
                ));
            }
            set.push(("NCCL_DEBUG".into(), "INFO".into()));
        }
    }
    let subsys = debug_subsys(user.get("NCCL_DEBUG_SUBSYS").map(String::as_str));
    if user.get("NCCL_DEBUG_SUBSYS") != Some(&subsys) {
        set.push(("NCCL_DEBUG_SUBSYS".into(), subsys));
    }
    let debug_file = match user.get("NCCL_DEBUG_FILE").filter(|v| !v.is_empty()) {
        Some(theirs) => {
            notes.push(format!(
                "NCCL_DEBUG_FILE={theirs} kept: the ranks' logs are read there"
            ));
            theirs.clone()
        }
        None => {
            let ours = log_dir.join(DEBUG_FILE_PATTERN).display().to_string();
            set.push(("NCCL_DEBUG_FILE".into(), ours.clone()));
            ours
        }
    };
    NcclEnv {
        set,
        debug_file,
        notes,
    }
}

/// The user's subsystem list with ours added. An exclusion list (`^COLL,P2P`) keeps its form, without
/// excluding any subsystem the verdict needs.
fn debug_subsys(user: Option<&str>) -> String {
    let user = user.map(str::trim).unwrap_or_default();
    let ours = |name: &str| NCCL_SUBSYS.iter().any(|s| s.eq_ignore_ascii_case(name));
    if let Some(excluded) = user.strip_prefix('^') {
        let kept: Vec<&str> = excluded
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && !ours(s))
            .collect();
        return if kept.is_empty() {
            "ALL".into()
        } else {
            format!("^{}", kept.join(","))
        };
    }
    let mut list: Vec<String> = user
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if list.iter().any(|s| s.eq_ignore_ascii_case("ALL")) {
        return user.to_string();
    }
    for s in NCCL_SUBSYS {
        if !list.iter().any(|have| have.eq_ignore_ascii_case(s)) {
            list.push(s.to_string());
        }
    }
    list.join(",")
}

/// The files NCCL wrote for `pattern` (`%h`/`%p` stand for any text) since `since`, in name order. Files
/// older than the run are someone else's.
pub fn debug_files(pattern: &str, since: SystemTime) -> Vec<PathBuf> {
    let path = Path::new(pattern);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return vec![];
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let name = name.to_string_lossy();
    let parts: Vec<&str> = name.split(['%']).collect();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| matches_pattern(&e.file_name().to_string_lossy(), &parts))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since)
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Whether `name` matches a pattern split at `%` (each later part begins with its one conversion letter).
fn matches_pattern(name: &str, parts: &[&str]) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return false;
    };
    let Some(mut left) = name.strip_prefix(first) else {
        return false;
    };
    for (i, part) in rest.iter().enumerate() {
        // `%h`, `%p`: any non-empty text up to the literal that follows.
        let literal = part.get(1..).unwrap_or_default();
        let last = i + 1 == rest.len();
        let at = if literal.is_empty() {
            if last {
                left.len()
            } else {
                1
            }
        } else if last {
            match left.strip_suffix(literal) {
                Some(l) => l.len(),
                None => return false,
            }
        } else {
            match left.get(1..).and_then(|l| l.find(literal)) {
                Some(at) => at + 1,
                None => return false,
            }
        };
        if at == 0 {
            return false;
        }
        left = &left[at + literal.len()..];
    }
    left.is_empty()
}

/// Everything read back after the run.
#[derive(Debug)]
pub struct Collected {
    pub tests: nccl_tests::TestOutput,
    pub ranks: ranks::RankMap,
    pub summary: Summary,
    /// Files matching the log pattern that are not logs (a FIFO, a link to a device), with why: not read.
    pub skipped: Vec<String>,
}

/// How long reading the logs back may take: NCCL's logs of a thousand ranks read in seconds.
pub const READ_BACK: Duration = Duration::from_secs(60);

/// Reads the merged output and the per-process NCCL files, regular files only (something else planted in the
/// log directory is skipped and named, never waited on), each line cut at [`MAX_LINE_BYTES`], all by
/// `deadline`. `collective` names it when the output does not (`all_reduce`, from `--collective` or the
/// COMMAND's program).
pub fn collect(
    output: &Path,
    files: &[PathBuf],
    collective: Option<&str>,
    deadline: Instant,
) -> Result<Collected, String> {
    let mut logs = vec![];
    let mut skipped = vec![];
    let mut tests = nccl_tests::TestOutput::default();
    let mut map = ranks::RankMap::new();
    for (i, log) in std::iter::once(output)
        .chain(files.iter().map(PathBuf::as_path))
        .enumerate()
    {
        let name = log.display().to_string();
        let file = match input::open(log, Accept::Regular) {
            Ok(f) => f,
            Err(e @ InputError::NotAFile(_)) if i > 0 => {
                skipped.push(format!("{name}: {e}"));
                continue;
            }
            Err(e) => return Err(format!("cannot read {name}: {e}")),
        };
        input::for_each_line(file, MAX_LINE_BYTES, Some(deadline), |no, bytes| {
            let line = String::from_utf8_lossy(bytes);
            let line = line.trim_end_matches('\r');
            if i == 0 {
                tests.read_line(line, no);
            }
            map.read_line(&name, no, line);
        })
        .map_err(|e| format!("cannot read {name}: {e}"))?;
        logs.push(log.to_path_buf());
    }
    if tests.collective.is_none() {
        tests.collective = collective.map(str::to_string);
    }
    map.add_header(&tests.ranks);
    let summary =
        nccl::analyze_paths(&logs, Accept::Regular, Some(deadline)).map_err(|e| e.to_string())?;
    Ok(Collected {
        tests,
        ranks: map,
        summary,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_users_subsystems_are_kept_and_ours_added() {
        assert_eq!(debug_subsys(None), "INIT,NET,GRAPH,ENV");
        assert_eq!(debug_subsys(Some("COLL,net")), "COLL,net,INIT,GRAPH,ENV");
        assert_eq!(debug_subsys(Some("ALL")), "ALL");
        assert_eq!(debug_subsys(Some("^NET,COLL")), "^COLL");
        assert_eq!(debug_subsys(Some("^INIT")), "ALL");
    }

    #[test]
    fn debug_level_and_file_follow_the_user_where_they_can() {
        let dir = Path::new("/scratch/fp");
        let e = nccl_env(&env(&[("NCCL_DEBUG", "WARN")]), dir);
        assert!(e.set.contains(&("NCCL_DEBUG".into(), "INFO".into())));
        assert_eq!(e.debug_file, "/scratch/fp/nccl.%h.%p.log");
        assert_eq!(e.notes.len(), 1, "{:?}", e.notes);
        let e = nccl_env(
            &env(&[
                ("NCCL_DEBUG", "trace"),
                ("NCCL_DEBUG_FILE", "/logs/n.%h.%p"),
            ]),
            dir,
        );
        assert!(!e
            .set
            .iter()
            .any(|(k, _)| k == "NCCL_DEBUG" || k == "NCCL_DEBUG_FILE"));
        assert_eq!(e.debug_file, "/logs/n.%h.%p");
    }

    #[test]
    fn debug_file_patterns_match_what_nccl_writes() {
        let parts: Vec<&str> = "nccl.%h.%p.log".split('%').collect();
        assert!(matches_pattern("nccl.gpu-a01.4711.log", &parts));
        assert!(matches_pattern("nccl.gpu-a01.example.4711.log", &parts));
        assert!(!matches_pattern("nccl..log", &parts));
        assert!(!matches_pattern("output.log", &parts));
        let parts: Vec<&str> = "n-%p".split('%').collect();
        assert!(matches_pattern("n-12", &parts));
        assert!(!matches_pattern("n-", &parts));
    }

    #[test]
    fn files_of_the_run_are_found_and_older_ones_left() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nccl.a.1.log"), "x").unwrap();
        let pattern = dir.path().join(DEBUG_FILE_PATTERN).display().to_string();
        assert_eq!(debug_files(&pattern, SystemTime::UNIX_EPOCH).len(), 1);
        let later = SystemTime::now() + std::time::Duration::from_secs(60);
        assert!(debug_files(&pattern, later).is_empty());
    }
}
