//! Never a pass on data that was not read: every probe, on every recorded tree under `testdata/hosts/`, meets
//! each file and directory it reads damaged, one at a time, and must then error or fail (never pass, never
//! silently skip). What a probe reads is taken from a clean run through a recording [`Host`], so a new probe
//! or a new read is covered without a list to keep. Only contents are damaged (files read, directories listed):
//! whether a path exists or where a link points is a fact about the node, and its absence may rightly decide a
//! verdict. But a file or link the probe looked for and did not find is planted back unreadable: missing is a
//! fact, unreadable is not, so the probe must then say it could not read it, never that it is missing.
//! Probes run in this process against recorded library answers (an empty recording where a tree has none),
//! active ones included; one file of each kind per probe and verdict stands for the rest ([`kind_of`]).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::host::{Access, Host};
use crate::pair::inventory::GpuSource;
use crate::probe::{CheckResult, Context, Inputs, Probe, Status};
use crate::profile::Profile;
use crate::recording::{Answers, ANSWERS_FILE};
use crate::rules::transfer_verdict::LinkRate;

/// How one file or directory is damaged.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    /// A symlink to itself where the file or directory was: every open or listing fails (ELOOP), for root too.
    Unreadable,
    /// A file whose text is no value the kernel writes.
    Garbage,
}

const GARBAGE: &str = "garbage?\n";

/// One probe run: its results and what it read.
struct Run {
    results: Vec<CheckResult>,
    reads: Vec<(String, Access)>,
}

fn run(probe: &dyn Probe, root: &Path, profile: &Profile, scratch: &Path) -> Run {
    let host = Host::at(root).expect("tree").recording();
    let answers = Answers::for_host(&host).expect("answers");
    let settings = profile.settings(probe.id());
    let inputs = Inputs::default();
    let cx = Context {
        host: &host,
        profile,
        settings: &settings,
        inputs: &inputs,
        answers: &answers,
        deadline: Instant::now() + Duration::from_secs(10),
        scratch: Some(scratch),
    };
    let results = probe.run(&cx);
    Run {
        results,
        reads: host.recorded(),
    }
}

/// A result as the comparison sees it: who, what verdict, and what it said (evidence included, so a FAIL
/// that now shows the damage differs from the clean FAIL).
fn shown(r: &CheckResult) -> (Option<String>, Status, String, Vec<String>) {
    (
        r.subject.clone(),
        r.status,
        r.summary.clone(),
        r.evidence.clone(),
    )
}

/// The measurements a result judged against a limit, by name.
fn judged(results: &[CheckResult]) -> BTreeSet<(Option<String>, String)> {
    results
        .iter()
        .flat_map(|r| {
            r.measurements
                .iter()
                .filter(|m| m.warn.is_some() || m.fail.is_some())
                .map(|m| (r.subject.clone(), m.name.clone()))
        })
        .collect()
}

/// What is wrong with `damaged` given `clean`, if anything. A new error or failure is what damage must
/// cause. Garbage in a file of free text (a version string, a firmware id) may instead be shown as read, as long
/// as no judgement was dropped on the way.
fn judge(
    clean: &[CheckResult],
    damaged: &[CheckResult],
    path: &str,
    damage: Damage,
) -> Option<String> {
    let before: BTreeSet<_> = clean.iter().map(shown).collect();
    let kept_judgements = judged(clean).is_subset(&judged(damaged));
    let shown_as_read = damage == Damage::Garbage
        && damaged
            .iter()
            .any(|r| r.evidence.iter().any(|e| e.contains(GARBAGE.trim())))
        && kept_judgements;
    // A read no verdict rests on (an attribute of a function that cannot be what the check looks for) may be
    // named as not read instead, as long as no judgement was dropped.
    let clean_evidence: BTreeSet<&String> = clean.iter().flat_map(|r| &r.evidence).collect();
    let named_unread = kept_judgements
        && damaged.iter().any(|r| {
            r.evidence
                .iter()
                .any(|e| e.contains(path) && !clean_evidence.contains(e))
        });
    let reported = shown_as_read
        || named_unread
        || damaged.iter().any(|r| {
            matches!(r.status, Status::Error | Status::Fail) && !before.contains(&shown(r))
        });
    let had = |subject: &Option<String>, status: Status| {
        clean
            .iter()
            .any(|r| &r.subject == subject && r.status == status)
    };
    let existed = |subject: &Option<String>| clean.iter().any(|r| &r.subject == subject);
    for r in damaged {
        if r.status == Status::Pass && existed(&r.subject) && !had(&r.subject, Status::Pass) {
            return Some(format!("{:?} became PASS", r.subject));
        }
        if r.status == Status::Skip && !had(&r.subject, Status::Skip) {
            return Some(format!("{:?} became SKIP: {}", r.subject, r.summary));
        }
    }
    if !reported {
        let list: Vec<String> = damaged
            .iter()
            .map(|r| format!("{} {:?} {}", r.status, r.subject, r.summary))
            .collect();
        return Some(format!("no new error or failure: {list:?}"));
    }
    None
}

/// What is wrong with `damaged` when `path`, missing in the clean run, was planted back unreadable: the probe must
/// not call it missing, nor pass or skip where it did not before. A read the verdict does not rest on may go
/// unmentioned.
fn judge_planted(clean: &[CheckResult], damaged: &[CheckResult], path: &str) -> Option<String> {
    let missing = format!("{path} = <missing>");
    if damaged
        .iter()
        .flat_map(|r| std::iter::once(&r.summary).chain(&r.evidence))
        .any(|t| t.contains(&missing))
    {
        return Some("shown as <missing>".into());
    }
    let had = |r: &CheckResult| {
        clean
            .iter()
            .any(|c| c.subject == r.subject && c.status == r.status)
    };
    damaged
        .iter()
        .find(|r| matches!(r.status, Status::Pass | Status::Skip) && !had(r))
        .map(|r| format!("{:?} became {}: {}", r.subject, r.status, r.summary))
}

/// An unreadable entry planted where host path `path` was missing, with the directories above it that were
/// missing too: a symlink to itself for a file or directory that is read (ELOOP), a regular file for a link
/// (readlink: EINVAL). Removed, with the directories made for it, when dropped.
struct Planted {
    real: PathBuf,
    /// The highest directory made for it, if any.
    made: Option<PathBuf>,
}

impl Planted {
    fn at(root: &Path, path: &str, access: Access) -> Option<Planted> {
        let real = Host::at(root).ok()?.resolve(path).ok()?;
        if fs::symlink_metadata(&real).is_ok() {
            return None;
        }
        let parent = real.parent()?;
        let made = parent
            .ancestors()
            .take_while(|d| fs::symlink_metadata(d).is_err())
            .last()
            .map(Path::to_path_buf);
        fs::create_dir_all(parent).ok()?;
        match access {
            Access::Link => fs::write(&real, "").unwrap(),
            _ => symlink(real.file_name()?, &real).unwrap(),
        }
        Some(Planted { real, made })
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        match &self.made {
            Some(dir) => fs::remove_dir_all(dir).unwrap(),
            None => fs::remove_file(&self.real).unwrap(),
        }
    }
}

/// Moves the real file or directory behind host path `path` aside and puts the damage in its place; the
/// returned guard puts it back.
struct Damaged {
    real: PathBuf,
    aside: PathBuf,
}

impl Damaged {
    fn apply(root: &Path, aside_dir: &Path, path: &str, damage: Damage) -> Option<Damaged> {
        let real = Host::at(root).ok()?.resolve(path).ok()?;
        Damaged::apply_at(real, aside_dir, damage)
    }

    /// The damage at `real`, a path in the tree itself (a symlink there is damaged, not what it points at).
    fn apply_at(real: PathBuf, aside_dir: &Path, damage: Damage) -> Option<Damaged> {
        let meta = fs::symlink_metadata(&real).ok()?;
        if damage == Damage::Garbage && !meta.is_file() {
            return None;
        }
        let aside = aside_dir.join("aside");
        fs::rename(&real, &aside).unwrap();
        match damage {
            Damage::Unreadable => symlink(real.file_name().unwrap(), &real).unwrap(),
            Damage::Garbage => fs::write(&real, GARBAGE).unwrap(),
        }
        Some(Damaged { real, aside })
    }
}

impl Drop for Damaged {
    fn drop(&mut self) {
        fs::remove_file(&self.real).unwrap();
        fs::rename(&self.aside, &self.real).unwrap();
    }
}

/// The kind of file a path is: PCI addresses and numbers become `#`
/// (`/sys/devices/pci0000:15/0000:15:01.0/infiniband/mlx5_0/ports/1/rate` →
/// `/sys/devices/pci#/#/infiniband/mlx#_#/ports/#/rate`). One file of each kind per probe and verdict stands for
/// the others: the same code reads them all.
fn kind_of(path: &str) -> String {
    path.split('/')
        .map(|part| {
            let is_address = part.contains(':');
            let mut out = String::new();
            let mut in_run = false;
            for c in part.chars() {
                let numeric = c.is_ascii_digit() || (is_address && c.is_ascii_hexdigit());
                if numeric || (is_address && matches!(c, ':' | '.')) {
                    if !in_run {
                        out.push('#');
                    }
                    in_run = true;
                } else {
                    out.push(c);
                    in_run = false;
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn trees() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts");
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A writable copy of `testdata/hosts/<tree>` at `<dir>/root`, beside room for the files moved aside. A tree
/// without a recording of library answers gets an empty one: nothing here calls a live library.
fn writable_copy(tree: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/hosts")
        .join(tree);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success());
    if !root.join(ANSWERS_FILE).exists() {
        fs::write(root.join(ANSWERS_FILE), "{}").unwrap();
    }
    (dir, root)
}

/// `DAMAGE_TREES=hgx-healthy,h200-gds cargo test --lib damage_sweep` limits the sweep to those trees.
#[test]
fn every_probe_meets_each_file_it_reads_damaged() {
    let only = std::env::var("DAMAGE_TREES").ok();
    let mut problems = Vec::new();
    let mut covered = BTreeSet::new();
    let scratch = tempfile::tempdir().unwrap();
    for tree in trees() {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|t| t == tree))
        {
            continue;
        }
        let (dir, root) = writable_copy(&tree);
        for profile_name in ["generic", "hgx-h100-ib"] {
            let profile = crate::profile::load(profile_name, &crate::probes::ids()).unwrap();
            for probe in crate::probes::all() {
                let clean = run(*probe, &root, &profile, scratch.path());
                // Nothing to lose: damage cannot make an all-error result any worse.
                if clean.results.iter().all(|r| r.status == Status::Error) {
                    continue;
                }
                let verdicts: Vec<Status> = clean.results.iter().map(|r| r.status).collect();
                for (path, access) in clean.reads.iter().filter(|(_, a)| *a != Access::Lookup) {
                    if !covered.insert((probe.id(), kind_of(path), verdicts.clone())) {
                        continue;
                    }
                    if let Some(planted) = Planted::at(&root, path, *access) {
                        let damaged = run(*probe, &root, &profile, scratch.path());
                        drop(planted);
                        if let Some(why) = judge_planted(&clean.results, &damaged.results, path) {
                            problems.push(format!(
                                "{tree} ({profile_name}) {}: {path} missing, planted unreadable: {why}",
                                probe.id()
                            ));
                        }
                        continue;
                    }
                    if *access != Access::Contents {
                        continue;
                    }
                    for damage in [Damage::Unreadable, Damage::Garbage] {
                        let Some(guard) = Damaged::apply(&root, dir.path(), path, damage) else {
                            continue;
                        };
                        let damaged = run(*probe, &root, &profile, scratch.path());
                        drop(guard);
                        if let Some(why) = judge(&clean.results, &damaged.results, path, damage) {
                            problems.push(format!(
                                "{tree} ({profile_name}) {}: {path} {damage:?}: {why}",
                                probe.id()
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} damaged reads not reported:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// What `pair` offers its peer from a survey, as the comparison sees it: each port with its link layer and rate.
type Offered = (Option<(Status, String)>, Vec<(String, String, LinkRate)>);

fn survey(root: &Path) -> (Offered, Vec<(String, Access)>) {
    let host = Host::at(root).expect("tree").recording();
    let answers = Answers::for_host(&host).expect("answers");
    let inv = crate::pair::inventory::inventory(&host, &answers, GpuSource::None("sweep".into()));
    let ports = inv
        .ports
        .into_iter()
        .map(|(p, _)| (p.name(), p.link_layer, p.rate))
        .collect();
    let none = inv.none.or(inv.gap).map(|r| (r.status, r.summary));
    ((none, ports), host.recorded())
}

/// What is wrong with a damaged survey given the clean one, if anything: it must error (or fail), or announce the
/// damaged port's rate unreadable; never a skip, a port left out or a placeholder rate for a hardware port, and
/// never the same offer as if nothing were wrong.
fn judge_survey(clean: &Offered, damaged: &Offered) -> Option<String> {
    match &damaged.0 {
        Some((Status::Error | Status::Fail, _)) => return None,
        Some((status, why)) => return Some(format!("became {status}: {why}")),
        None => {}
    }
    for (name, layer, rate) in &clean.1 {
        let Some((_, dlayer, drate)) = damaged.1.iter().find(|(n, _, _)| n == name) else {
            return Some(format!("{name} left out"));
        };
        if dlayer != layer {
            return Some(format!("{name}: link layer {layer} became {dlayer}"));
        }
        if matches!(rate, LinkRate::Gbps(_)) && matches!(drate, LinkRate::NotMeaningful(_)) {
            return Some(format!(
                "{name}: a hardware rate became a placeholder: {drate:?}"
            ));
        }
    }
    let shows_it = damaged
        .1
        .iter()
        .any(|(_, _, r)| matches!(r, LinkRate::Unreadable(_)))
        && !clean
            .1
            .iter()
            .any(|(_, _, r)| matches!(r, LinkRate::Unreadable(_)));
    (!shows_it).then(|| format!("nothing shows the damage: {:?}", damaged.1))
}

/// `pair`'s port survey (what it offers its peer) meets each file it reads damaged, as the probes do, on every
/// tree whose recording lists RDMA ports; and each device's `device` link made a loop, which cannot be resolved:
/// a hardware port whose link or rate cannot be read was once offered as a software device, its bandwidth not
/// judged.
#[test]
fn pairs_port_survey_meets_each_file_it_reads_damaged() {
    let mut problems = Vec::new();
    let mut swept = 0;
    for tree in trees() {
        let (dir, root) = writable_copy(&tree);
        let (clean, reads) = survey(&root);
        if clean.0.is_some() || clean.1.is_empty() {
            continue;
        }
        swept += 1;
        let mut covered = BTreeSet::new();
        let mut targets: Vec<(String, Option<PathBuf>)> = reads
            .iter()
            .filter(|(p, a)| *a == Access::Contents && covered.insert(kind_of(p)))
            .map(|(p, _)| (p.clone(), None))
            .collect();
        let host = Host::at(&root).unwrap();
        for (name, _, _) in &clean.1 {
            let device = name.split('/').next().unwrap();
            let class = format!("/sys/class/infiniband/{device}");
            if let Ok(real) = host.resolve(&class) {
                if fs::symlink_metadata(real.join("device")).is_ok() {
                    targets.push((format!("{class}/device"), Some(real.join("device"))));
                }
            }
        }
        for (path, link) in targets {
            for damage in [Damage::Unreadable, Damage::Garbage] {
                let guard = match &link {
                    Some(real) if damage == Damage::Unreadable => {
                        Damaged::apply_at(real.clone(), dir.path(), damage)
                    }
                    Some(_) => None,
                    None => Damaged::apply(&root, dir.path(), &path, damage),
                };
                let Some(guard) = guard else { continue };
                let (damaged, _) = survey(&root);
                // A function that cannot be a NIC changes no offer: the presence survey pair stands on names
                // it as not read, and the ports offered are the clean ones.
                let named = damaged == clean
                    && crate::rules::presence::Survey::read(
                        &Host::at(&root).unwrap(),
                        crate::rules::presence::Stack::Rdma,
                    )
                    .evidence
                    .iter()
                    .any(|e| e.contains(&path) && e.contains("not read"));
                drop(guard);
                if let Some(why) = judge_survey(&clean, &damaged).filter(|_| !named) {
                    problems.push(format!("{tree}: {path} {damage:?}: {why}"));
                }
            }
        }
    }
    assert!(swept > 0, "no tree offers a port");
    assert!(
        problems.is_empty(),
        "{} damaged reads of pair's port survey not reported:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
