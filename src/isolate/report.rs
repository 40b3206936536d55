//! The isolation report: every node's verdict with its evidence, every round's groups and results. Rendered as
//! JSON (`schemas/isolate.schema.json`), JUnit (a test case per node), a self-contained HTML page (the rounds and
//! the node × test matrix, culprits marked), a table for the terminal, and a plain list of culprit nodes for the
//! engine's drain or taint command.

use std::fmt::Write as _;

use serde::Serialize;

use super::measure::Measured;
use super::plan::{Planner, Test, TestRef, Verdict};
use crate::model::{FindingCode, Remedy};
use crate::report::junit::{attr, text};
use crate::report::ToolInfo;

/// 1: the first form. 2: each node's finding `code` and remediation `step`.
pub const SCHEMA_VERSION: u32 = 2;

/// The check id `isolate`'s codes are registered under (`explain isolate`).
pub const ID: &str = "isolate";

const CULPRIT_NODE: FindingCode = FindingCode {
    code: "ISO001",
    title: "a culprit node: its groups failed, and it failed again beside known-good nodes",
    explanation: "The search proved where, not why: drain the node and run `fabric-preflight run` and `pair` on \
        it; their codes name the step (a module, a GPU reset, a cable). Its evidence lists every test it was in.",
    step: None,
};
const CULPRIT_LINK: FindingCode = FindingCode {
    code: "ISO002",
    title: "a culprit link: two nodes that pass with others fail together",
    explanation:
        "Each node passed with other nodes, and the two failed together: the cable, transceiver or \
        switch port between them (or the switch's route). `pair` between the two confirms.",
    step: Some(Remedy::ServiceRma),
};
const UNCONFIRMED: FindingCode = FindingCode {
    code: "ISO003",
    title: "an unconfirmed suspect: it failed, but no confirming test could be run",
    explanation: "The node was in a failing group, but no known-good node (or not enough of the group's own) \
        was left to confirm it: add known-good nodes to the search, or run `fabric-preflight run` on it.",
    step: None,
};
const UNTESTED: FindingCode = FindingCode {
    code: "ISO004",
    title: "an untested node: it was never in a test that ran",
    explanation: "The search stopped (interrupted, out of rounds) before the node was tested: nothing passed.",
    step: None,
};

/// Every code `isolate`'s node verdicts carry (gathered by `commands::findings`).
pub const FINDINGS: &[(&str, &[&FindingCode])] =
    &[(ID, &[&CULPRIT_NODE, &CULPRIT_LINK, &UNCONFIRMED, &UNTESTED])];

#[derive(Debug, Clone, Serialize)]
pub struct IsolateReport {
    pub schema_version: u32,
    pub tool: ToolInfo,
    pub timestamp: String,
    /// `pass` (every node healthy), `fail` (a culprit node or link), `undetermined` (no culprit, but nodes left
    /// unconfirmed or untested).
    pub status: &'static str,
    pub exit_code: u8,
    pub duration_ms: u64,
    /// Where the nodes came from (`--nodes`, a hostfile, `SLURM_JOB_NODELIST`).
    pub nodes_from: String,
    /// The `--topology` file, when given.
    pub topology_from: Option<String>,
    /// The COMMAND template run per group.
    pub command: Vec<String>,
    /// `--floor` in GB/s, when given (else each report's own floor).
    pub floor_gbytes_per_sec: Option<f64>,
    /// The signal that stopped the search early.
    pub interrupted: Option<String>,
    pub summary: Summary,
    pub nodes: Vec<NodeReport>,
    pub rounds: Vec<RoundReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub nodes: usize,
    pub rounds: usize,
    pub tests: usize,
    pub culprit_nodes: Vec<String>,
    pub culprit_links: Vec<[String; 2]>,
    pub unconfirmed: Vec<String>,
    pub untested: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    pub name: String,
    /// Its topology group, when `--topology` named one.
    pub group: Option<String>,
    /// `culprit_node`, `culprit_link`, `unconfirmed_suspect`, `healthy` or `untested`.
    pub verdict: &'static str,
    /// The verdict in words, naming the tests that decided it.
    pub reason: String,
    /// The verdict's finding code (`explain CODE`); none for a healthy node.
    pub code: Option<&'static str>,
    /// The remediation ladder's step for that code, where it has one.
    pub step: Option<Remedy>,
    /// Every test the node was in, in order.
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    pub test: String,
    pub round: usize,
    pub purpose: &'static str,
    pub passed: bool,
    /// Known-good padding in this test.
    pub padding: bool,
    pub busbw_gbytes_per_sec: Option<f64>,
    pub rail: Option<String>,
    pub transport: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RoundReport {
    pub round: usize,
    pub tests: Vec<TestReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TestReport {
    /// `r2t0`: round 2, test 0.
    pub id: String,
    /// `screen`, `split`, `confirm`, `halves`, `cross` or `sweep`.
    pub purpose: &'static str,
    pub nodes: Vec<String>,
    /// Known-good nodes added so the group could run.
    pub padding: Vec<String>,
    pub passed: bool,
    pub busbw_gbytes_per_sec: Option<f64>,
    pub floor_gbytes_per_sec: Option<f64>,
    pub rail: Option<String>,
    pub transport: Option<String>,
    /// How the job ended (`exit 0`, `timed out after 900 s`).
    pub ending: String,
    pub detail: String,
    pub duration_ms: u64,
}

/// What the command knows besides the planner.
pub struct Context<'a> {
    pub names: &'a [String],
    pub groups: &'a [Option<String>],
    pub measured: &'a [Vec<Measured>],
    pub nodes_from: String,
    pub topology_from: Option<String>,
    pub command: Vec<String>,
    pub floor: Option<f64>,
    pub interrupted: Option<String>,
    pub timestamp: String,
    pub duration_ms: u64,
}

fn verdict_code(v: &Verdict) -> Option<&'static FindingCode> {
    match v {
        Verdict::CulpritNode { .. } => Some(&CULPRIT_NODE),
        Verdict::CulpritLink { .. } => Some(&CULPRIT_LINK),
        Verdict::Unconfirmed { .. } => Some(&UNCONFIRMED),
        Verdict::Healthy { .. } => None,
        Verdict::Untested => Some(&UNTESTED),
    }
}

fn verdict_name(v: &Verdict) -> &'static str {
    match v {
        Verdict::CulpritNode { .. } => "culprit_node",
        Verdict::CulpritLink { .. } => "culprit_link",
        Verdict::Unconfirmed { .. } => "unconfirmed_suspect",
        Verdict::Healthy { .. } => "healthy",
        Verdict::Untested => "untested",
    }
}

impl IsolateReport {
    pub fn build(planner: &Planner, cx: &Context<'_>) -> IsolateReport {
        let rounds = planner.rounds();
        // Only rounds whose results came back (an interrupted round has none).
        let done = cx.measured.len().min(rounds.len());
        let test_of = |at: TestRef| -> (&Test, &Measured) {
            (
                &rounds[at.round - 1][at.index],
                &cx.measured[at.round - 1][at.index],
            )
        };
        let name = |m: usize| cx.names[m].clone();
        let shown = |at: TestRef| {
            let (test, measured) = test_of(at);
            let others: Vec<&str> = test.members.iter().map(|&m| cx.names[m].as_str()).collect();
            format!(
                "{at} ({}, {}: {}; {})",
                test.purpose.name(),
                if measured.passed { "passed" } else { "failed" },
                others.join(","),
                measured.detail
            )
        };
        let verdicts = planner.verdicts();
        let nodes = verdicts
            .iter()
            .enumerate()
            .map(|(m, v)| {
                let reason = match v {
                    Verdict::CulpritNode {
                        failed,
                        confirmed,
                        inside: None,
                    } => format!(
                        "failed in {}; confirmed against a known-good node in {}",
                        shown(*failed),
                        shown(*confirmed)
                    ),
                    Verdict::CulpritNode {
                        failed,
                        confirmed,
                        inside: Some(first),
                    } => format!(
                        "failed in {}; no known-good node was outside that group, and it failed with two of the group's own: in {} and in {}",
                        shown(*failed),
                        shown(*first),
                        shown(*confirmed)
                    ),
                    Verdict::CulpritLink { peer, failed } => format!(
                        "the link or switch between {} and {}: each passed with other nodes, together they failed in {}",
                        name(m),
                        name(*peer),
                        shown(*failed)
                    ),
                    Verdict::Unconfirmed { failed, why } => {
                        format!("failed in {}; {why}", shown(*failed))
                    }
                    Verdict::Healthy { passed } => format!("passed in {}", shown(*passed)),
                    Verdict::Untested => "never in a test that ran".to_string(),
                };
                let evidence = rounds[..done]
                    .iter()
                    .enumerate()
                    .flat_map(|(r, tests)| {
                        tests.iter().enumerate().filter_map(move |(i, t)| {
                            t.members.contains(&m).then_some((r, i, t))
                        })
                    })
                    .map(|(r, i, t)| {
                        let measured = &cx.measured[r][i];
                        Evidence {
                            test: TestRef { round: r + 1, index: i }.to_string(),
                            round: r + 1,
                            purpose: t.purpose.name(),
                            passed: measured.passed,
                            padding: t.padding.contains(&m),
                            busbw_gbytes_per_sec: measured.busbw,
                            rail: measured.rail.clone(),
                            transport: measured.transport.clone(),
                        }
                    })
                    .collect();
                NodeReport {
                    name: name(m),
                    group: cx.groups[m].clone(),
                    verdict: verdict_name(v),
                    code: verdict_code(v).map(|c| c.code),
                    step: verdict_code(v).and_then(|c| c.step),
                    reason,
                    evidence,
                }
            })
            .collect::<Vec<_>>();
        let with = |kind: &str| -> Vec<String> {
            nodes
                .iter()
                .filter(|n| n.verdict == kind)
                .map(|n| n.name.clone())
                .collect()
        };
        let mut culprit_links: Vec<[String; 2]> = verdicts
            .iter()
            .enumerate()
            .filter_map(|(m, v)| match v {
                Verdict::CulpritLink { peer, .. } if m < *peer => Some([name(m), name(*peer)]),
                _ => None,
            })
            .collect();
        culprit_links.dedup();
        let summary = Summary {
            nodes: cx.names.len(),
            rounds: done,
            tests: cx.measured[..done].iter().map(Vec::len).sum(),
            culprit_nodes: with("culprit_node"),
            culprit_links,
            unconfirmed: with("unconfirmed_suspect"),
            untested: with("untested"),
        };
        let (status, exit_code) =
            if !summary.culprit_nodes.is_empty() || !summary.culprit_links.is_empty() {
                ("fail", crate::exit::Exit::CHECK_FAILED)
            } else if summary.unconfirmed.is_empty()
                && summary.untested.is_empty()
                && cx.interrupted.is_none()
            {
                ("pass", crate::exit::Exit::OK)
            } else {
                ("undetermined", crate::exit::Exit::COULD_NOT_RUN)
            };
        let rounds = rounds[..done]
            .iter()
            .zip(cx.measured)
            .enumerate()
            .map(|(r, (tests, measured))| RoundReport {
                round: r + 1,
                tests: tests
                    .iter()
                    .zip(measured)
                    .enumerate()
                    .map(|(i, (t, m))| TestReport {
                        id: TestRef {
                            round: r + 1,
                            index: i,
                        }
                        .to_string(),
                        purpose: t.purpose.name(),
                        nodes: t.members.iter().map(|&n| name(n)).collect(),
                        padding: t.padding.iter().map(|&n| name(n)).collect(),
                        passed: m.passed,
                        busbw_gbytes_per_sec: m.busbw,
                        floor_gbytes_per_sec: m.floor,
                        rail: m.rail.clone(),
                        transport: m.transport.clone(),
                        ending: m.ending.clone(),
                        detail: m.detail.clone(),
                        duration_ms: m.duration_ms,
                    })
                    .collect(),
            })
            .collect();
        IsolateReport {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo {
                name: env!("CARGO_PKG_NAME").into(),
                version: env!("CARGO_PKG_VERSION").into(),
                commit: crate::build_info::COMMIT.into(),
            },
            timestamp: cx.timestamp.clone(),
            status,
            exit_code,
            duration_ms: cx.duration_ms,
            nodes_from: cx.nodes_from.clone(),
            topology_from: cx.topology_from.clone(),
            command: cx.command.clone(),
            floor_gbytes_per_sec: cx.floor,
            interrupted: cx.interrupted.clone(),
            summary,
            nodes,
            rounds,
        }
    }

    pub fn json(&self) -> String {
        // Plain data with string keys: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// One line per culprit node: what the engine's drain or taint command reads.
    pub fn culprits(&self) -> String {
        self.summary
            .culprit_nodes
            .iter()
            .map(|n| format!("{n}\n"))
            .collect()
    }

    pub fn junit(&self) -> String {
        let count = |v: &str| self.nodes.iter().filter(|n| n.verdict == v).count();
        let failures = count("culprit_node") + count("culprit_link");
        let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            x,
            "<testsuites name=\"fabric-preflight isolate\" tests=\"{}\" failures=\"{failures}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
            self.nodes.len(),
            count("unconfirmed_suspect"),
            count("untested"),
            self.duration_ms as f64 / 1000.0
        );
        let _ = writeln!(
            x,
            "  <testsuite name=\"isolate\" tests=\"{}\" failures=\"{failures}\" errors=\"{}\" skipped=\"{}\" timestamp=\"{}\">",
            self.nodes.len(),
            count("unconfirmed_suspect"),
            count("untested"),
            attr(&self.timestamp)
        );
        for n in &self.nodes {
            let _ = write!(
                x,
                "    <testcase classname=\"isolate\" name=\"{}\"",
                attr(&n.name)
            );
            let element = match n.verdict {
                "culprit_node" | "culprit_link" => Some("failure"),
                "unconfirmed_suspect" => Some("error"),
                "untested" => Some("skipped"),
                _ => None,
            };
            match element {
                None => {
                    let _ = writeln!(
                        x,
                        "><system-out>{}</system-out></testcase>",
                        text(&n.reason)
                    );
                }
                Some(e) => {
                    let code = n.code.unwrap_or(n.verdict);
                    let _ = writeln!(
                        x,
                        ">\n      <{e} message=\"{}\" type=\"{code}\">{}</{e}>\n    </testcase>",
                        attr(&format!("{code}: {}: {}", n.verdict, n.reason)),
                        text(&n.reason)
                    );
                }
            }
        }
        x.push_str("  </testsuite>\n</testsuites>\n");
        x
    }

    /// For the terminal: the verdict, the culprits with their reasons, one line per round.
    pub fn table(&self) -> String {
        let s = &self.summary;
        let mut t = format!(
            "{} isolate: {} nodes, {} rounds, {} tests: {} culprit node(s), {} culprit link(s), {} unconfirmed, {} untested\n",
            self.status.to_uppercase(),
            s.nodes,
            s.rounds,
            s.tests,
            s.culprit_nodes.len(),
            s.culprit_links.len(),
            s.unconfirmed.len(),
            s.untested.len()
        );
        for n in self.nodes.iter().filter(|n| n.verdict != "healthy") {
            let _ = writeln!(
                t,
                "  {:<20} {:<20} {:<6} {}",
                n.name,
                n.verdict,
                n.code.unwrap_or(""),
                n.reason
            );
        }
        for r in &self.rounds {
            let passed = r.tests.iter().filter(|t| t.passed).count();
            let _ = writeln!(
                t,
                "  round {}: {} test(s), {passed} passed{}",
                r.round,
                r.tests.len(),
                r.tests
                    .iter()
                    .filter(|t| !t.passed)
                    .map(|t| format!("; {} {} failed: {}", t.id, t.purpose, t.nodes.join(",")))
                    .collect::<String>()
            );
        }
        crate::report::escape_controls(&t).into_owned()
    }

    /// A page with no outside resource: the verdicts, every round's tests, and the node × test matrix.
    pub fn html(&self) -> String {
        let mut h = String::from(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fabric-preflight isolate</title>\n<style>\n\
             body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\n\
             table{border-collapse:collapse;margin:.5em 0 1.5em}\n\
             td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}\n\
             th.t{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;font-size:12px}\n\
             td.c{text-align:center;width:1.6em}\n\
             .pass{background:#d8f0d8}.fail{background:#f5c0c0}.pad{background:#e8e8f8}\n\
             tr.culprit_node td.n,tr.culprit_link td.n{background:#d22;color:#fff;font-weight:bold}\n\
             tr.unconfirmed_suspect td.n{background:#f0c040}tr.untested td.n{background:#ddd}\n\
             .status-fail{color:#b00}.status-pass{color:#070}.status-undetermined{color:#a60}\n\
             </style></head><body>\n",
        );
        let s = &self.summary;
        let _ = writeln!(
            h,
            "<h1>fabric-preflight isolate: <span class=\"status-{0}\">{0}</span></h1>\n<p>{1} nodes ({2}), {3} rounds, {4} tests, {5}. Command: <code>{6}</code></p>",
            self.status,
            s.nodes,
            text(&self.nodes_from),
            s.rounds,
            s.tests,
            text(&self.timestamp),
            text(&self.command.join(" "))
        );
        let _ = writeln!(
            h,
            "<ul><li>culprit nodes: {}</li><li>culprit links: {}</li><li>unconfirmed suspects: {}</li><li>untested: {}</li></ul>",
            list(&s.culprit_nodes),
            list(&s.culprit_links.iter().map(|[a, b]| format!("{a} ↔ {b}")).collect::<Vec<_>>()),
            list(&s.unconfirmed),
            list(&s.untested)
        );
        h.push_str("<h2>Nodes × tests</h2>\n<p>✓ passed, ✗ failed, + known-good padding; culprits in red.</p>\n<table id=\"matrix\"><tr><th>node</th><th>verdict</th>");
        for r in &self.rounds {
            for t in &r.tests {
                let _ = write!(
                    h,
                    "<th class=\"t\" title=\"{}\">{} {}</th>",
                    attr(&t.detail),
                    t.id,
                    t.purpose
                );
            }
        }
        h.push_str("</tr>\n");
        for n in &self.nodes {
            let _ = write!(
                h,
                "<tr class=\"{}\"><td class=\"n\" title=\"{}\">{}</td><td>{}</td>",
                n.verdict,
                attr(&n.reason),
                text(&n.name),
                n.verdict.replace('_', " ")
            );
            for r in &self.rounds {
                for t in &r.tests {
                    let cell = n.evidence.iter().find(|e| e.test == t.id);
                    match cell {
                        None => h.push_str("<td class=\"c\"></td>"),
                        Some(e) => {
                            let (class, mark) = match (e.passed, e.padding) {
                                (_, true) => ("pad", "+"),
                                (true, _) => ("pass", "✓"),
                                (false, _) => ("fail", "✗"),
                            };
                            let _ = write!(h, "<td class=\"c {class}\">{mark}</td>");
                        }
                    }
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n<h2>Rounds</h2>\n");
        for r in &self.rounds {
            let _ = writeln!(
                h,
                "<h3>Round {}</h3>\n<table><tr><th>test</th><th>purpose</th><th>nodes</th><th>padding</th><th>result</th><th>busbw GB/s</th><th>floor</th><th>rail</th><th>transport</th><th>detail</th></tr>",
                r.round
            );
            for t in &r.tests {
                let num = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_default();
                let _ = writeln!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    t.id,
                    t.purpose,
                    text(&t.nodes.join(", ")),
                    text(&t.padding.join(", ")),
                    if t.passed { "pass" } else { "fail" },
                    if t.passed { "pass" } else { "fail" },
                    num(t.busbw_gbytes_per_sec),
                    num(t.floor_gbytes_per_sec),
                    text(t.rail.as_deref().unwrap_or("")),
                    text(t.transport.as_deref().unwrap_or("")),
                    text(&t.detail)
                );
            }
            h.push_str("</table>\n");
        }
        h.push_str("</body></html>\n");
        h
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        format!("<b>{}</b>", text(&items.join(", ")))
    }
}
