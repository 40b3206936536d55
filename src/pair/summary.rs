//! `pair --summarize`: every node's ring links from the reports the nodes wrote, the node common to the failing
//! ones, and what the missing reports leave unknown.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::bail;

use crate::model::{common, CheckResult, Status};
use crate::pair::judge::{self, ID_RING};
use crate::report::RunReport;

/// A node's report is tens of KiB; a path to `/dev/zero` or a huge file must not be read to its end.
const MAX_REPORT_BYTES: u64 = 16 << 20;

/// `--summarize`: every node's ring links together, and the node common to the failing ones; then an error for
/// each report that could not be read (a node killed before writing one), naming what it leaves unknown. Only
/// no readable report at all, or none from a ring, is a usage error.
pub fn summarize(paths: &[PathBuf]) -> anyhow::Result<Vec<CheckResult>> {
    let mut reports = Vec::new();
    let mut unreadable = Vec::new();
    for path in paths {
        let report = crate::input::read_text(path, MAX_REPORT_BYTES)
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
        bail!("no ring in the given reports (they come from `pair --ring --format json`, schema_version 2 or later)");
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
        .fix("pass the report that node wrote; a node killed before writing one has none: run `pair --ring` there again")
        .code(&common::UNREAD);
        r.evidence = unknown.clone();
        results.push(r);
    }
    Ok(results)
}

/// What the readable reports leave unknown, from the ring their `ring` fields describe: the nodes none of them
/// speaks for, and the links neither of whose ends reported.
fn unknown_parts(reports: &[RunReport]) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    let mut reported = std::collections::BTreeSet::new();
    for ring in reports.iter().filter_map(|r| r.ring.as_ref()) {
        if let Some(me) = ring.members.get(ring.rank) {
            reported.insert(me.clone());
            if nodes.is_empty() {
                nodes = ring.members.clone();
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

/// The ring links the node reports carry (`ring.links`), each unordered pair once with the worse of the two
/// ends' statuses.
fn links_from_reports(reports: &[RunReport]) -> Vec<(String, String, Status)> {
    let mut links: BTreeMap<(String, String), Status> = BTreeMap::new();
    for link in reports
        .iter()
        .filter_map(|r| r.ring.as_ref())
        .flat_map(|r| &r.links)
    {
        let (a, b) = (link.a.clone(), link.b.clone());
        let key = if a <= b { (a, b) } else { (b, a) };
        let e = links.entry(key).or_insert(link.status);
        *e = (*e).max(link.status);
    }
    links.into_iter().map(|((a, b), s)| (a, b, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Ring, RingLink};

    /// A ring node's report as `pair --ring` writes it: the typed ring, and a `pair.ring` result whose words
    /// are for people (here reworded, as a translation or a later release might).
    fn node_report(dir: &std::path::Path, rank: usize, links: [Status; 2]) -> PathBuf {
        let members: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let n = members.len();
        let link = |x: usize, y: usize, status| RingLink {
            a: members[x % n].clone(),
            b: members[y % n].clone(),
            status,
        };
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![CheckResult::fail(ID_RING, "worded differently")
            .evidence("links", "see the ring field")];
        report.ring = Some(Ring {
            links: vec![
                link(rank + n - 1, rank, links[0]),
                link(rank, rank + 1, links[1]),
            ],
            members: members.clone(),
            rank,
            source: "--peers".into(),
        });
        let path = dir.join(format!("{rank}.json"));
        std::fs::write(&path, serde_json::to_string(&report).unwrap()).unwrap();
        path
    }

    /// `--summarize` used to parse `a <-> b = fail` and `ring = a,b,c (rank 1 of 3` back out of the evidence:
    /// reworded evidence left it with no link at all. It reads the typed ring.
    #[test]
    fn the_summary_reads_the_typed_ring_not_the_evidence() {
        let dir = tempfile::tempdir().unwrap();
        // b's two links fail as seen from a and c; b's own report is missing.
        let files = vec![
            node_report(dir.path(), 0, [Status::Pass, Status::Fail]),
            node_report(dir.path(), 2, [Status::Fail, Status::Pass]),
            dir.path().join("1.json"),
        ];
        let results = summarize(&files).unwrap();
        assert_eq!(results[0].status, Status::Fail, "{results:?}");
        assert!(
            results[0]
                .summary
                .starts_with("b is common to every failing pair"),
            "{}",
            results[0].summary
        );
        assert!(
            results[1]
                .evidence
                .contains(&"ring nodes without a readable report = b".to_string()),
            "{:?}",
            results[1].evidence
        );
        // Every link of b has a reporting end: none is unknown.
        assert!(
            results[1]
                .evidence
                .contains(&"links no readable report saw (unknown) = none".to_string()),
            "{:?}",
            results[1].evidence
        );
    }

    /// A report without the typed ring (schema_version 1, or not from `pair --ring`) gives no link, whatever its
    /// evidence says.
    #[test]
    fn evidence_prose_alone_is_no_ring() {
        let dir = tempfile::tempdir().unwrap();
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![CheckResult::fail(ID_RING, "x")
            .evidence("ring", "a,b,c (rank 0 of 3, from --peers)")
            .evidence("c <-> a", "fail")];
        let path = dir.path().join("old.json");
        std::fs::write(&path, serde_json::to_string(&report).unwrap()).unwrap();
        let err = summarize(&[path]).unwrap_err().to_string();
        assert!(err.contains("no ring in the given reports"), "{err}");
    }
}
