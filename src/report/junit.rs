//! `--format junit`: one `<testsuite>` per run inside `<testsuites>`, named after the node so that the reports of
//! many nodes merged by a CI server stay apart; one `<testcase>` per result
//! (classname = check id, name = subject or the id). fail → `<failure>`, error → `<error>`, skip →
//! `<skipped>`, warn → a passing testcase whose `<system-out>` carries the warning, so CI shows it without
//! failing the build; under `--strict` a warning fails the run, so it is a `<failure>`. A result
//! built on library answers says `library answers: live|recorded` (in its details, or as its `<system-out>`).
//! A coded result's `type` is the code of the finding that decided it (`GDS003`, see `explain CODE`) and its
//! message starts with that code; an uncoded one's `type` is its status.

use std::fmt::Write as _;

use super::{describe_measurement, RunReport};
use crate::model::{AnswerSource, CheckResult, Status};

const SUITE: &str = "fabric-preflight";

pub fn render(report: &RunReport) -> String {
    let counts = format!(
        r#"tests="{}" failures="{}" errors="{}" skipped="{}" time="{}""#,
        report.checks.len(),
        report.count(Status::Fail)
            + if report.strict {
                report.count(Status::Warn)
            } else {
                0
            },
        report.count(Status::Error),
        report.count(Status::Skip),
        seconds(report.duration_ms),
    );
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // Writing into a String cannot fail.
    let _ = writeln!(x, r#"<testsuites name="{SUITE}" {counts}>"#);
    let _ = writeln!(
        x,
        r#"  <testsuite name="{}" {counts} hostname="{}">"#,
        attr(&report.host.node_name),
        attr(&report.host.hostname)
    );
    x.push_str("    <properties>\n");
    let environment = report
        .host
        .environment
        .as_ref()
        .map(|e| e.describe())
        .unwrap_or_default();
    for (name, value) in [
        ("profile", report.profile.as_str()),
        ("environment", environment.as_str()),
        ("status", report.status().as_str()),
        ("version", report.tool.version.as_str()),
        ("kernel", report.host.kernel.as_str()),
        ("root", report.host.root.as_str()),
        (
            "library_answers",
            report.library_answers.map_or("", AnswerSource::as_str),
        ),
    ] {
        let _ = writeln!(
            x,
            r#"      <property name="{name}" value="{}"/>"#,
            attr(value)
        );
    }
    x.push_str("    </properties>\n");
    for c in &report.checks {
        testcase(&mut x, c, report.strict);
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

fn testcase(x: &mut String, c: &CheckResult, strict: bool) {
    let _ = write!(
        x,
        r#"    <testcase classname="{}" name="{}" time="{}""#,
        attr(&c.id),
        attr(c.subject.as_deref().unwrap_or(&c.id)),
        seconds(c.duration_ms),
    );
    let coded = match c.deciding_code() {
        Some(code) => format!("{code}: {}", c.summary),
        None => c.summary.clone(),
    };
    let summary = attr(&coded);
    let kind = |status: &str| attr(c.deciding_code().unwrap_or(status));
    match c.status {
        // Only the mark: a pass or skip has no details to show.
        Status::Pass | Status::Skip if c.library_answers.is_some() => {
            let skipped = if c.status == Status::Skip {
                format!(r#"<skipped message="{summary}"/>"#)
            } else {
                String::new()
            };
            let _ = writeln!(
                x,
                ">{skipped}<system-out>library answers: {}</system-out></testcase>",
                c.library_answers.map_or("", AnswerSource::as_str)
            );
        }
        Status::Pass => x.push_str("/>\n"),
        Status::Fail | Status::Error => {
            let element = if c.status == Status::Fail {
                "failure"
            } else {
                "error"
            };
            let _ = writeln!(
                x,
                r#"><{element} message="{summary}" type="{}">{}</{element}></testcase>"#,
                kind(c.status.as_str()),
                text(&details(c))
            );
        }
        Status::Skip => {
            let _ = writeln!(x, r#"><skipped message="{summary}"/></testcase>"#);
        }
        Status::Warn if strict => {
            let _ = writeln!(
                x,
                r#"><failure message="{summary}" type="{}">{}</failure></testcase>"#,
                kind("warn"),
                text(&details(c))
            );
        }
        Status::Warn => {
            let out = format!("WARN: {coded}\n{}", details(c));
            let _ = writeln!(
                x,
                "><system-out>{}</system-out></testcase>",
                text(out.trim_end())
            );
        }
    }
}

/// Measurements, evidence and the fix, one per line.
fn details(c: &CheckResult) -> String {
    let mut lines: Vec<String> = c.measurements.iter().map(describe_measurement).collect();
    lines.extend(c.evidence.iter().cloned());
    if let Some(fix) = &c.remediation {
        lines.push(format!("fix: {fix}"));
    }
    lines.extend(c.findings.iter().map(super::describe_finding));
    if let Some(source) = c.library_answers {
        lines.push(format!("library answers: {}", source.as_str()));
    }
    lines.join("\n")
}

fn seconds(ms: u64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

/// Escaped for an attribute value in double quotes; line breaks and tabs survive as character references
/// (a parser would turn them into spaces otherwise).
pub(crate) fn attr(s: &str) -> String {
    escape(s, true)
}

/// Escaped for element content.
pub(crate) fn text(s: &str) -> String {
    escape(s, false)
}

fn escape(s: &str, in_attribute: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if in_attribute => out.push_str("&quot;"),
            '\'' if in_attribute => out.push_str("&apos;"),
            '\n' if in_attribute => out.push_str("&#10;"),
            '\t' if in_attribute => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            '\n' | '\t' => out.push(ch),
            // XML 1.0 has no way to write these at all, not even as character references.
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use quick_xml::events::{BytesStart, Event};
    use quick_xml::Reader;

    use super::*;
    use crate::report::HostInfo;

    /// One element as the parser saw it: name, attributes, text inside, path of parents.
    #[derive(Debug)]
    struct Element {
        name: String,
        path: String,
        attrs: BTreeMap<String, String>,
        text: String,
    }

    fn attributes(e: &BytesStart) -> BTreeMap<String, String> {
        e.attributes()
            .map(|a| {
                let a = a.unwrap();
                (
                    String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                    a.unescape_value().unwrap().into_owned(),
                )
            })
            .collect()
    }

    /// Parses with a real XML parser (checking end tags) and flattens the tree in document order.
    fn parse(xml: &str) -> Vec<Element> {
        let mut reader = Reader::from_str(xml);
        reader.config_mut().check_end_names = true;
        let mut stack: Vec<usize> = Vec::new();
        let mut elements: Vec<Element> = Vec::new();
        loop {
            let event = reader.read_event().unwrap();
            if let Event::Start(e) | Event::Empty(e) = &event {
                let path = stack
                    .iter()
                    .map(|i| elements[*i].name.as_str())
                    .collect::<Vec<_>>()
                    .join("/");
                elements.push(Element {
                    name: String::from_utf8(e.name().as_ref().to_vec()).unwrap(),
                    path,
                    attrs: attributes(e),
                    text: String::new(),
                });
            }
            match event {
                Event::Start(_) => stack.push(elements.len() - 1),
                Event::Text(t) => {
                    if let Some(i) = stack.last() {
                        elements[*i].text.push_str(&t.unescape().unwrap());
                    }
                }
                Event::End(_) => {
                    stack.pop();
                }
                Event::Eof => break,
                _ => {}
            }
        }
        assert!(stack.is_empty());
        elements
    }

    fn testcases(elements: &[Element]) -> Vec<&Element> {
        elements.iter().filter(|e| e.name == "testcase").collect()
    }

    /// The child of testcase `i` (counting testcases in order), if any.
    fn child_of(elements: &[Element], i: usize) -> Option<&Element> {
        let start = elements
            .iter()
            .enumerate()
            .filter(|(_, e)| e.name == "testcase")
            .nth(i)
            .unwrap()
            .0;
        elements
            .get(start + 1)
            .filter(|e| e.path.ends_with("testsuite/testcase"))
    }

    #[test]
    fn junit_suite_counts_match_the_results() {
        let xml = render(&RunReport::sample_for_tests());
        let elements = parse(&xml);
        assert_eq!(elements[0].name, "testsuites");
        let suite = &elements[1];
        assert_eq!(suite.name, "testsuite");
        assert_eq!(suite.path, "testsuites");
        for (key, want) in [
            ("name", "gpu-node-07"),
            ("tests", "6"),
            ("failures", "1"),
            ("errors", "1"),
            ("skipped", "1"),
            ("time", "1.234"),
            ("hostname", "gpu-node-07"),
        ] {
            assert_eq!(suite.attrs[key], want, "testsuite {key}");
        }
        assert_eq!(elements.iter().filter(|e| e.name == "testsuite").count(), 1);
        assert_eq!(testcases(&elements).len(), 6);
        let profile = elements
            .iter()
            .find(|e| e.name == "property" && e.attrs["name"] == "profile")
            .unwrap();
        assert_eq!(profile.attrs["value"], "hgx-h200-ib");
    }

    #[test]
    fn junit_strict_counts_the_warning_as_a_failure() {
        let mut report = RunReport::sample_for_tests();
        report.strict = true;
        let elements = parse(&render(&report));
        assert_eq!(elements[1].attrs["failures"], "2");
        assert_eq!(elements[0].attrs["failures"], "2");
        let failures: Vec<&Element> = elements.iter().filter(|e| e.name == "failure").collect();
        assert_eq!(failures.len(), 2);
        assert_eq!(failures[1].attrs["type"], "warn");
        assert_eq!(failures[1].attrs["message"], "GPU link downtrained to x8");
        assert!(!elements.iter().any(|e| e.name == "system-out"));
    }

    #[test]
    fn junit_testcase_per_status_has_the_right_child() {
        let xml = render(&RunReport::sample_for_tests());
        let elements = parse(&xml);
        let cases = testcases(&elements);
        // Report order: pass, fail, warn, error, skip, pass.
        assert_eq!(cases[0].attrs["classname"], "driver.nvidia");
        assert_eq!(cases[0].attrs["name"], "driver.nvidia");
        assert!(child_of(&elements, 0).is_none());

        assert_eq!(cases[1].attrs["classname"], "rdma.link");
        assert_eq!(cases[1].attrs["name"], "mlx5_0/1");
        let failure = child_of(&elements, 1).unwrap();
        assert_eq!(failure.name, "failure");
        assert_eq!(failure.attrs["message"], "port down");
        assert!(failure
            .text
            .contains("/sys/class/infiniband/mlx5_0/ports/1/state = 1: DOWN"));
        assert!(failure.text.contains("(replayed)"));
        assert!(failure.text.contains("fix: check the cable"));

        let warning = child_of(&elements, 2).unwrap();
        assert_eq!(warning.name, "system-out");
        assert!(warning
            .text
            .starts_with("WARN: GPU link downtrained to x8\n"));

        let error = child_of(&elements, 3).unwrap();
        assert_eq!(error.name, "error");
        assert!(error.text.contains("Permission denied"));

        let skipped = child_of(&elements, 4).unwrap();
        assert_eq!(skipped.name, "skipped");
        assert_eq!(skipped.attrs["message"], "no --nccl-log given");
    }

    #[test]
    fn junit_nasty_text_round_trips_through_a_parser() {
        let nasty = "a <&\"'> b\u{1}c\td\ne\r";
        let report = RunReport::new(
            HostInfo {
                hostname: "node\"<1>".into(),
                node_name: "node\"<1>".into(),
                kernel: "6.8".into(),
                root: "/".into(),
                environment: None,
            },
            "p&q".into(),
            7,
            vec![
                CheckResult::fail("x.nasty", nasty)
                    .subject("sub<'>")
                    .evidence("/path/with]]>", nasty)
                    .fix("echo '<&>'"),
                CheckResult::warn("x.warn", nasty).note("\u{0}\u{8}\u{b}\u{c}\u{1f}"),
                CheckResult::skip("x.skip", nasty),
            ],
        );
        let xml = render(&report);
        for ch in xml.chars() {
            let c = ch as u32;
            assert!(
                c >= 0x20 || matches!(ch, '\n' | '\t' | '\r'),
                "forbidden char U+{c:04X} in output"
            );
        }
        let elements = parse(&xml);
        let suite = &elements[1];
        assert_eq!(suite.attrs["hostname"], "node\"<1>");
        assert_eq!(suite.attrs["failures"], "1");
        assert_eq!(suite.attrs["skipped"], "1");
        let cleaned = "a <&\"'> b\u{FFFD}c\td\ne\r";
        let cases = testcases(&elements);
        assert_eq!(cases[0].attrs["name"], "sub<'>");
        let failure = child_of(&elements, 0).unwrap();
        assert_eq!(failure.attrs["message"], cleaned);
        assert!(failure.text.contains("/path/with]]> = a <&\"'> b"));
        assert!(failure.text.contains("fix: echo '<&>'"));
        let out = child_of(&elements, 1).unwrap();
        assert!(out
            .text
            .contains("\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}"));
        assert_eq!(child_of(&elements, 2).unwrap().attrs["message"], cleaned);
        let profile = elements
            .iter()
            .find(|e| e.name == "property" && e.attrs["name"] == "profile")
            .unwrap();
        assert_eq!(profile.attrs["value"], "p&q");
    }

    #[test]
    fn junit_empty_run_is_a_valid_empty_suite() {
        let elements = parse(&render(&RunReport::empty_for_tests()));
        assert_eq!(elements[1].attrs["tests"], "0");
        assert!(testcases(&elements).is_empty());
    }
}
