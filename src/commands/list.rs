//! `list`, `explain ID` and `profiles`: what the tool checks, without checking anything.

use std::fmt::Write as _;

use anyhow::bail;

use crate::exit::Exit;
use crate::probe::{Environment, Kind};
use crate::profile::{self, BUILTIN};

pub fn main() -> anyhow::Result<u8> {
    let mut out = String::new();
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING);
    table.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    table.set_width(crate::report::output::terminal_width());
    table.set_header(["CHECK", "VERIFIES", "NEEDS", "MEANINGFUL ON"]);
    for p in crate::probes::all() {
        let needs: Vec<&str> = p.needs().iter().map(|n| n.as_str()).collect();
        table.add_row([
            p.id(),
            p.title(),
            &needs.join(", "),
            &environments(p.meta().meaningful),
        ]);
    }
    let _ = writeln!(out, "{table}");
    Ok(super::emit(&fitted(&out), Exit::OK))
}

/// `explain CHECK`, `explain CODE`, or `explain` alone: every finding code.
pub fn explain(arg: Option<&str>) -> anyhow::Result<u8> {
    match arg {
        None => super::findings::list(),
        Some(code) if super::findings::looks_like_code(code) => super::findings::explain(code),
        Some(id) => explain_check(id),
    }
}

fn explain_check(id: &str) -> anyhow::Result<u8> {
    let mut out = String::new();
    let Some(p) = crate::probes::find(id) else {
        bail!("unknown check id `{id}` (see `fabric-preflight list`)");
    };
    let e = p.explain();
    let needs: Vec<&str> = p.needs().iter().map(|n| n.as_str()).collect();
    let kind = match p.kind() {
        Kind::Static => "static (reads files; runs in the main process)",
        Kind::Library => {
            "library (calls vendor libraries in a child process killed at its deadline)"
        }
        Kind::Active => "active (moves data; runs alone, in a child process)",
    };
    let _ = writeln!(out, "{}: {}\n", p.id(), p.title());
    let _ = writeln!(out, "Kind:     {kind}");
    let _ = writeln!(
        out,
        "Deadline: {} s by default (profile: checks.{}.timeout)",
        p.default_timeout().as_secs_f64(),
        p.id()
    );
    let _ = writeln!(
        out,
        "Needs:    {}\n",
        if needs.is_empty() {
            "nothing special".to_string()
        } else {
            needs.join(", ")
        }
    );
    let _ = writeln!(out, "Reads:\n  {}\n", one_line(e.reads));
    let _ = writeln!(out, "Why it matters:\n  {}\n", one_line(e.why));
    let _ = writeln!(out, "Failures and fixes:");
    for (failure, fix) in e.fixes {
        let _ = writeln!(out, "  - {failure}\n      fix: {}", one_line(fix));
    }
    let _ = writeln!(
        out,
        "\nMeaningful on: {}",
        environments(p.meta().meaningful)
    );
    let codes = p.meta().findings;
    if !codes.is_empty() {
        let _ = writeln!(out, "\nFinding codes (`fabric-preflight explain CODE`):");
        for c in codes {
            let step = c.step.map_or("-", |s| s.as_str());
            let _ = writeln!(out, "  {}  {step:<15}  {}", c.code, c.title);
        }
    }
    Ok(super::emit(&fitted(&out), Exit::OK))
}

pub fn profiles() -> anyhow::Result<u8> {
    let mut out = String::new();
    let ids = crate::probes::ids();
    for (name, _) in BUILTIN {
        let p = profile::load(name, &ids)?;
        let _ = writeln!(out, "{name}\n  {}", one_line(&p.description));
        let expect = serde_yaml::to_string(&p.expect).unwrap_or_default();
        let set: Vec<&str> = expect.lines().filter(|l| !l.ends_with(": null")).collect();
        if !set.is_empty() {
            let _ = writeln!(out, "  expects: {}", set.join(", "));
        }
        let required: Vec<&str> = p
            .checks
            .iter()
            .filter(|(_, s)| s.required == Some(true))
            .map(|(id, _)| id.as_str())
            .collect();
        if !required.is_empty() {
            let _ = writeln!(out, "  required checks: {}", required.join(", "));
        }
        let _ = writeln!(out,);
    }
    Ok(super::emit(&fitted(&out), Exit::OK))
}

/// `bare_metal, cloud_vm, container`.
fn environments(list: &[Environment]) -> String {
    let names: Vec<&str> = list.iter().map(|e| e.as_str()).collect();
    names.join(", ")
}

/// Collapses the whitespace of multi-line string literals; [`fitted`] wraps to the terminal.
pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text wrapped to the terminal's width.
pub(super) fn fitted(text: &str) -> String {
    crate::report::fit(text, crate::report::output::terminal_width())
}
