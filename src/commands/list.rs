//! `list`, `explain ID` and `profiles`: what the tool checks, without checking anything.

use std::fmt::Write as _;

use anyhow::bail;

use crate::exit::Exit;
use crate::probe::Kind;
use crate::profile::{self, BUILTIN};

pub fn main() -> anyhow::Result<u8> {
    let mut out = String::new();
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING);
    table.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    table.set_width(crate::report::output::terminal_width());
    table.set_header(["CHECK", "VERIFIES", "NEEDS"]);
    for p in crate::probes::all() {
        let needs: Vec<&str> = p.needs().iter().map(|n| n.as_str()).collect();
        table.add_row([p.id(), p.title(), &needs.join(", ")]);
    }
    let _ = writeln!(out, "{table}");
    Ok(super::emit(&fitted(&out), Exit::OK))
}

pub fn explain(id: &str) -> anyhow::Result<u8> {
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

/// Collapses the whitespace of multi-line string literals; [`fitted`] wraps to the terminal.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text wrapped to the terminal's width.
fn fitted(text: &str) -> String {
    crate::report::fit(text, crate::report::output::terminal_width())
}
