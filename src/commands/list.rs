//! `list`, `explain ID` and `profiles`: what the tool checks, without checking anything.

use anyhow::bail;

use crate::exit::Exit;
use crate::probe::Kind;
use crate::profile::{self, BUILTIN};

pub fn main() -> anyhow::Result<u8> {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING);
    table.set_header(["CHECK", "VERIFIES", "NEEDS"]);
    for p in crate::probes::all() {
        let needs: Vec<&str> = p.needs().iter().map(|n| n.as_str()).collect();
        table.add_row([p.id(), p.title(), &needs.join(", ")]);
    }
    println!("{table}");
    Ok(Exit::OK)
}

pub fn explain(id: &str) -> anyhow::Result<u8> {
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
    println!("{}: {}\n", p.id(), p.title());
    println!("Kind:     {kind}");
    println!(
        "Deadline: {} s by default (profile: checks.{}.timeout)",
        p.default_timeout().as_secs_f64(),
        p.id()
    );
    println!(
        "Needs:    {}\n",
        if needs.is_empty() {
            "nothing special".to_string()
        } else {
            needs.join(", ")
        }
    );
    println!("Reads:\n  {}\n", wrap(e.reads));
    println!("Why it matters:\n  {}\n", wrap(e.why));
    println!("Failures and fixes:");
    for (failure, fix) in e.fixes {
        println!(
            "  - {failure}\n      fix: {}",
            wrap(fix).replace("\n  ", "\n           ")
        );
    }
    Ok(Exit::OK)
}

pub fn profiles() -> anyhow::Result<u8> {
    let ids = crate::probes::ids();
    for (name, _) in BUILTIN {
        let p = profile::load(name, &ids)?;
        println!("{name}\n  {}", wrap(&p.description));
        let expect = serde_yaml::to_string(&p.expect).unwrap_or_default();
        let set: Vec<&str> = expect.lines().filter(|l| !l.ends_with(": null")).collect();
        if !set.is_empty() {
            println!("  expects: {}", set.join(", "));
        }
        let required: Vec<&str> = p
            .checks
            .iter()
            .filter(|(_, s)| s.required == Some(true))
            .map(|(id, _)| id.as_str())
            .collect();
        if !required.is_empty() {
            println!("  required checks: {}", required.join(", "));
        }
        println!();
    }
    Ok(Exit::OK)
}

/// Collapses the whitespace of multi-line string literals and wraps at ~100 columns.
fn wrap(text: &str) -> String {
    let mut out = String::new();
    let mut line_len = 0;
    for word in text.split_whitespace() {
        if line_len > 0 && line_len + word.len() > 100 {
            out.push_str("\n  ");
            line_len = 0;
        } else if line_len > 0 {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(word);
        line_len += word.len();
    }
    out
}
