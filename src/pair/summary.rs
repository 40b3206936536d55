//! `pair --summarize`: every node's ring links from the reports the nodes wrote, the node common to the failing
//! ones, and what the missing reports leave unknown.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::bail;

use crate::pair::judge::{self, ID_RING};
use crate::probe::{CheckResult, Status};
use crate::report::RunReport;

/// `--summarize`: every node's ring links together, and the node common to the failing ones; then an error for
/// each report that could not be read (a node killed before writing one), naming what it leaves unknown. Only
/// no readable report at all, or none from a ring, is a usage error.
pub fn summarize(paths: &[PathBuf]) -> anyhow::Result<Vec<CheckResult>> {
    let mut reports = Vec::new();
    let mut unreadable = Vec::new();
    for path in paths {
        let report = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|text| {
                serde_json::from_str::<RunReport>(&text).map_err(|e| {
                    format!(
                        "{}: not a fabric-preflight JSON report: {e}",
                        path.display()
                    )
                })
            });
        match report {
            Ok(r) => reports.push(r),
            Err(why) => unreadable.push((path, why)),
        }
    }
    if reports.is_empty() {
        let whys: Vec<&str> = unreadable.iter().map(|(_, why)| why.as_str()).collect();
        bail!("no report could be read: {}", whys.join("; "));
    }
    let links = links_from_reports(&reports);
    if links.is_empty() {
        bail!("no pair.ring results in the given reports (they come from `pair --ring --format json`)");
    }
    let mut summary = judge::ring_summary(&format!("{} reports", reports.len()), &links);
    summary.evidence.insert(
        0,
        format!(
            "reports from {}",
            reports
                .iter()
                .map(|r| r.host.hostname.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let mut results = vec![summary];
    if unreadable.is_empty() {
        return Ok(results);
    }
    let unknown = unknown_parts(&reports);
    for (path, why) in unreadable {
        let mut r = CheckResult::error(
            ID_RING,
            format!("{why}: the ring nodes and links it would have covered are unknown"),
        )
        .subject(path.display().to_string())
        .fix("pass the report that node wrote; a node killed before writing one has none: run `pair --ring` there again");
        r.evidence = unknown.clone();
        results.push(r);
    }
    Ok(results)
}

/// What the readable reports leave unknown, from the ring their `pair.ring` results describe (`ring = a,b,c
/// (rank 1 of 3, …)`): the nodes none of them speaks for, and the links neither of whose ends reported.
fn unknown_parts(reports: &[RunReport]) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    let mut reported = std::collections::BTreeSet::new();
    for line in reports
        .iter()
        .flat_map(|r| &r.checks)
        .filter(|c| c.id == ID_RING)
        .flat_map(|c| &c.evidence)
        .filter_map(|e| e.strip_prefix("ring = "))
    {
        let Some((list, rest)) = line.split_once(" (rank ") else {
            continue;
        };
        let list: Vec<String> = list.split(',').map(str::to_string).collect();
        let rank = rest
            .split_once(" of ")
            .and_then(|(r, _)| r.parse::<usize>().ok());
        if let Some(me) = rank.and_then(|r| list.get(r)) {
            reported.insert(me.clone());
            if nodes.is_empty() {
                nodes = list;
            }
        }
    }
    if nodes.is_empty() {
        return vec!["ring nodes = unknown: no readable report describes the ring".into()];
    }
    let silent: Vec<&str> = nodes
        .iter()
        .filter(|n| !reported.contains(*n))
        .map(String::as_str)
        .collect();
    let mut unseen = std::collections::BTreeSet::new();
    for (i, a) in nodes.iter().enumerate() {
        let b = &nodes[(i + 1) % nodes.len()];
        if a != b && !reported.contains(a) && !reported.contains(b) {
            unseen.insert(if a <= b { (a, b) } else { (b, a) });
        }
    }
    let none = |v: Vec<String>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    vec![
        format!(
            "ring nodes without a readable report = {}",
            none(silent.iter().map(|n| n.to_string()).collect())
        ),
        format!(
            "links no readable report saw (unknown) = {}",
            none(unseen.iter().map(|(a, b)| format!("{a} <-> {b}")).collect())
        ),
    ]
}

/// `A <-> B = status` evidence lines of the `pair.ring` results in node reports, each unordered pair once with
/// the worse of the two ends' statuses.
fn links_from_reports(reports: &[RunReport]) -> Vec<(String, String, Status)> {
    let mut links: BTreeMap<(String, String), Status> = BTreeMap::new();
    for check in reports
        .iter()
        .flat_map(|r| &r.checks)
        .filter(|c| c.id == ID_RING)
    {
        for line in &check.evidence {
            let Some((pair, status)) = line.rsplit_once(" = ") else {
                continue;
            };
            let Some((a, b)) = pair.split_once(" <-> ") else {
                continue;
            };
            let Ok(status) =
                serde_json::from_value::<Status>(serde_json::Value::String(status.into()))
            else {
                continue;
            };
            let key = if a <= b {
                (a.to_string(), b.to_string())
            } else {
                (b.to_string(), a.to_string())
            };
            let e = links.entry(key).or_insert(status);
            *e = (*e).max(status);
        }
    }
    links.into_iter().map(|((a, b), s)| (a, b, s)).collect()
}
