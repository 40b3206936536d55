//! `collective`: an NCCL job run through the site's own launcher, judged from what it printed. [`launch`]
//! starts and bounds the COMMAND; [`nccl_tests`] reads nccl-tests' result table (the torch workload prints the
//! same); [`ranks`] attributes every NCCL line to its process and rank; the transport comes from the shared
//! NCCL analysis (`crate::nccl`). All three consume one pass of `nccl`'s reader over each log (decoded when
//! a container runtime stored it); [`judge`] turns it all into results in `run`'s report format.

pub(crate) mod judge;
pub(crate) mod launch;
pub(crate) mod nccl_tests;
pub(crate) mod paths;
pub(crate) mod ranks;
pub(crate) mod variant;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::input::{self, Accept, InputError};
use crate::nccl::line::{Ids, Record};
use crate::nccl::{Analyzer, Reader, Sink, Summary};

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

/// The consumers of one pass over a job's logs: the NCCL analysis takes the records, the rank map and (from
/// the merged output only) the result table take the lines.
struct JobSinks {
    analyzer: Analyzer,
    map: ranks::RankMap,
    tests: nccl_tests::TestOutput,
    source: String,
    /// The log being read is the COMMAND's merged output, where nccl-tests prints its table.
    output: bool,
}

impl Sink for JobSinks {
    fn begin(&mut self, source: &str) {
        self.source = source.to_string();
        self.analyzer.begin(source);
    }

    fn ids(&self) -> Ids {
        self.analyzer.ids()
    }

    fn record(&mut self, line_no: u64, record: Record<'_>) {
        self.analyzer.record(line_no, record);
    }

    fn wants_lines(&self) -> bool {
        true
    }

    fn line(&mut self, line_no: u64, text: &str) {
        let line = text.trim_end_matches('\r');
        if self.output {
            self.tests.read_line(line, line_no);
        }
        self.map.read_line(&self.source, line_no, line);
    }
}

/// Reads the merged output and the per-process NCCL files in one pass each (decoded when a container
/// runtime stored them), regular files only (something else planted in the log directory is skipped and
/// named, never waited on; a file named twice is read once), all by `deadline`. `collective` names it when the
/// output does not (`all_reduce`, from `--collective` or the COMMAND's program).
pub fn collect(
    output: &Path,
    files: &[PathBuf],
    collective: Option<&str>,
    deadline: Instant,
) -> Result<Collected, String> {
    let mut skipped = vec![];
    let mut reader = Reader::new();
    let mut job = JobSinks {
        analyzer: Analyzer::new(),
        map: ranks::RankMap::new(),
        tests: nccl_tests::TestOutput::default(),
        source: String::new(),
        output: false,
    };
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
        job.output = i == 0;
        reader
            .read_file(&mut job, &name, file, Some(deadline))
            .map_err(|e| format!("cannot read {name}: {e}"))?;
    }
    let JobSinks {
        analyzer,
        mut map,
        mut tests,
        ..
    } = job;
    if tests.collective.is_none() {
        tests.collective = collective.map(str::to_string);
    }
    map.add_header(&tests.ranks);
    Ok(Collected {
        tests,
        ranks: map,
        summary: analyzer.finish(reader.into_input()),
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

    /// A job's merged output as nccl-tests and NCCL print it: the rank header, channel and init lines of
    /// two processes, the result table.
    const JOB: &str = "\
# nThread 1 nGpus 1 minBytes 8388608 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#  Rank  0 Group  0 Pid  30211 on    gpu-a01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  30212 on    gpu-a02 device  0 [0x18] NVIDIA H100 80GB HBM3
gpu-a01:30211:30211 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>
gpu-a01:30211:30300 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a02:30212:30301 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA
gpu-a01:30211:30211 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5 - Init COMPLETE
gpu-a02:30212:30212 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5 - Init COMPLETE
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     8388608       2097152     float     sum      -1    98.11   85.50   85.50      0    97.43   86.10   86.10      0
  4294967296    1073741824     float     sum      -1  22876.3  187.75  187.75      0  22850.1  187.96  187.96      0
# Avg bus bandwidth    : 136.83
";

    /// What `collective` understood of a job: rows, processes (host, pid, ranks, GPU, NICs used), verdict.
    fn understood(c: &Collected) -> String {
        let rows: Vec<String> = c
            .tests
            .rows
            .iter()
            .map(|r| format!("{} {}", r.bytes, r.in_place.busbw_gbytes_per_sec))
            .collect();
        let processes: Vec<String> = c
            .ranks
            .processes()
            .map(|p| {
                let nics: Vec<String> = p.used_nics();
                format!("{}:{} {:?} {:?} {nics:?}", p.host, p.pid, p.ranks, p.gpu)
            })
            .collect();
        format!(
            "{rows:?} {processes:?} {:?} {} {:?}",
            c.tests.ranks.len(),
            c.summary.verdict,
            c.tests.avg_busbw_gbytes_per_sec
        )
    }

    /// `JOB` as a container runtime stores it, each line passed to `store` with whether to split it in two
    /// (the runtime's partial lines).
    fn stored(store: impl Fn(&str, bool) -> String) -> String {
        JOB.lines()
            .map(|l| {
                let split = l.contains("via NET") || l.contains("4294967296");
                if split {
                    let (a, b) = l.split_at(l.len() / 2);
                    format!("{}{}", store(a, true), store(b, false))
                } else {
                    store(l, false)
                }
            })
            .collect()
    }

    /// A job whose output a container runtime stored (CRI's `<time> <stream> <P|F> <text>`, Docker's
    /// json-file lines; a line split in two by the runtime) is understood as the plain output is: the rows,
    /// the rank map and the transport from one pass over each log, decoded.
    #[test]
    fn runtime_stored_job_logs_are_understood_as_plain_ones() {
        let dir = tempfile::tempdir().unwrap();
        let collected = |text: &str| {
            let output = dir.path().join(OUTPUT_FILE);
            std::fs::write(&output, text).unwrap();
            let deadline = Instant::now() + READ_BACK;
            collect(&output, &[], None, deadline).unwrap()
        };
        let plain = understood(&collected(JOB));
        assert!(
            plain.contains("187.96") && plain.contains("ib-gdrdma"),
            "{plain}"
        );
        let cri = stored(|text, split| {
            let tag = if split { "P" } else { "F" };
            format!("2026-11-29T10:15:02.123456789Z stdout {tag} {text}\n")
        });
        let docker = stored(|text, split| {
            let log = if split {
                text.to_string()
            } else {
                format!("{text}\n")
            };
            let line =
                serde_json::json!({"log": log, "stream": "stdout", "time": "2026-11-29T10:15:02Z"});
            format!("{line}\n")
        });
        for (format, text) in [("CRI", cri), ("Docker", docker)] {
            assert_eq!(understood(&collected(&text)), plain, "{format}:\n{text}");
        }
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
