//! The layering of `src/`, pinned: every `crate::…` (and `super::…`) path of every file is checked against
//! [`FLOORS`] and the rule that no probe imports another probe. The rules live here, once; ARCHITECTURE.md
//! shows them as [`rules_text`] writes them, and this test fails when the two differ.
//!
//! A line scan, not a parser: comments are skipped, `use crate::{a, b::c}` groups are read whole, and a file's
//! `#[cfg(test)] mod tests` (and files declared `#[cfg(test)] mod x;`) are exempt: tests may reach any floor.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Floors of `src/`, top to bottom. A module (a root file or a directory) may import only modules on floors
/// below its own: nothing sideways, nothing up. The files of a [`HOMES`] directory are modules of their own,
/// named `home::file`.
const FLOORS: &[(&str, &[&str])] = &[
    (
        "entry: the binary and one module per subcommand",
        &["main", "commands"],
    ),
    ("flags", &["cli"]),
    ("fleet: fault isolation over collective jobs", &["isolate"]),
    (
        "engines: checks, node pairs, collective jobs",
        &["runner", "pair", "collective"],
    ),
    ("reports and where they go", &["report"]),
    (
        "probes: one file per check; --profile auto",
        &["probes", "auto_profile"],
    ),
    (
        "domain rules",
        &[
            "rules::presence",
            "rules::nic_role",
            "rules::gds_target",
            "rules::grace",
            "rules::nvlink_domain",
        ],
    ),
    (
        "probe contract, NCCL log analysis, data movement",
        &["probe", "nccl", "measure"],
    ),
    (
        "profiles, recorded answers, vendor libraries",
        &["profile", "recording", "dynlib"],
    ),
    (
        "shared rules: PCIe tree, environment, transport, P2PDMA, transfer legs",
        &[
            "rules::topology",
            "rules::environment",
            "rules::transfer_verdict",
            "rules::rdma_transport",
            "rules::gds_p2pdma",
        ],
    ),
    ("kernel file parsers", &["sysfs"]),
    (
        "host root, child processes, bounded commands, supervised tasks, exit codes",
        &["host", "child", "bounded_command", "tasks", "exit"],
    ),
    (
        "leaves",
        &[
            "model",
            "input",
            "interrupt",
            "progress",
            "build_info",
            "version",
        ],
    ),
];

/// Directories that only gather modules of one kind (`src/rules/`): each file in one is placed on a floor by
/// itself, so rules on different floors can share a home.
const HOMES: &[&str] = &["rules"];

/// The module a path of segments under `src/` (or after `crate::`) names: its first segment, or the first two
/// joined by `::` in a [`HOMES`] directory.
fn module_of(segments: &[&str]) -> String {
    match segments {
        [home, file, ..] if HOMES.contains(home) => format!("{home}::{file}"),
        [first, ..] => first.to_string(),
        [] => String::new(),
    }
}

/// Imports against the rules that exist today, each to be removed by moving what it imports: this list only
/// shrinks (an entry whose import is gone fails the test until it is deleted here). `(file, module imported)`.
/// Empty since issue 30's moves; kept so a debt taken on knowingly is written down, not hidden.
const KNOWN_DEBT: &[(&str, &str)] = &[];

/// The rules as ARCHITECTURE.md shows them.
fn rules_text() -> String {
    let mut text = String::from("```\n");
    let shown: Vec<String> = FLOORS.iter().map(|(_, ms)| shown(ms)).collect();
    let width = shown.iter().map(String::len).max().unwrap_or(0);
    for (i, ((what, _), modules)) in FLOORS.iter().zip(&shown).enumerate() {
        text.push_str(&format!("{:>2}  {modules:<width$}  {what}\n", i + 1));
    }
    text.push_str(
        "\nA module imports only modules on floors below its own (a higher number).\n\
         probes/X imports no probes/Y (probes/mod.rs, the registry, names them all; probes/shared/ holds\n\
         the facts several probes read).\n```\n",
    );
    text
}

/// A floor's modules as the map shows them: `a, b`, or `home::{a, b}` when they share a home.
fn shown(modules: &[&str]) -> String {
    let home = modules[0].split_once("::").map(|(h, _)| h);
    let files: Option<Vec<&str>> = modules
        .iter()
        .map(|m| {
            m.split_once("::")
                .filter(|(h, _)| Some(*h) == home)
                .map(|(_, f)| f)
        })
        .collect();
    match (home, files) {
        (Some(home), Some(files)) => format!("{home}::{{{}}}", files.join(", ")),
        _ => modules.join(", "),
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/`-relative path, `/`-separated: `probes/gpu_p2p.rs`.
fn rel(path: &Path) -> String {
    path.strip_prefix(src())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Files declared `#[cfg(test)] mod x;`: test code, exempt.
fn test_only_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            let declared = pair[1]
                .trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let (true, Some(name)) = (pair[0].trim() == "#[cfg(test)]", declared) {
                let name_rs = format!("{name}.rs");
                let dir = match file.file_name().unwrap().to_str().unwrap() {
                    "mod.rs" | "lib.rs" => file.parent().unwrap().to_path_buf(),
                    _ => file.with_extension(""),
                };
                found.insert(dir.join(name_rs));
            }
        }
    }
    found
}

/// The paths `line` names after `crate::` or `super::`, a `{…}` group split into its members:
/// `use crate::{a, b::c};` → `["crate", "a"]`, `["crate", "b", "c"]`.
fn paths(line: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for root in ["crate::", "super::"] {
        let mut rest = line;
        while let Some(at) = rest.find(root) {
            let preceded_by_ident = rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            let after = &rest[at + root.len()..];
            rest = after;
            if preceded_by_ident {
                continue;
            }
            let head = root.trim_end_matches(':').to_string();
            let members = match after.strip_prefix('{') {
                Some(group) => top_level_members(group),
                None => vec![after],
            };
            for member in members {
                let mut p = vec![head.clone()];
                p.extend(segments(member.trim()));
                found.push(p);
            }
        }
    }
    found.retain(|p| p.len() > 1);
    found
}

/// The members of a `{…}` group (`group` starts after its `{`), split at its own commas, not at those of groups
/// nested in it.
fn top_level_members(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut members) = (0, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                members.push(&group[start..i]);
                return members;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                members.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    members.push(&group[start..]);
    members
}

/// The identifiers of a path up to where it stops being one: `a::b::{c}` → `a`, `b`.
fn segments(text: &str) -> Vec<String> {
    text.split("::")
        .map(|s| {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .take_while(|s| !s.is_empty())
        .collect()
}

/// `(index, text)` of each line that is not a comment, a `use` that rustfmt spread over several lines joined
/// into the first.
fn statements(lines: &[&str]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open_use = false;
    for (n, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        if open_use {
            out.last_mut().unwrap().1.push_str(line.trim());
        } else {
            out.push((n, line.to_string()));
            let code = line
                .trim_start()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            open_use = code.starts_with("use ");
        }
        open_use &= !line.contains(';');
    }
    out
}

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Every import against the rules: `(file, module imported, line number, the rule it breaks)`.
fn violations() -> Vec<(String, String, usize, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let exempt = test_only_files(&files);
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !exempt.contains(*f)) {
        let rel = rel(file);
        if rel == "lib.rs" {
            continue;
        }
        let parts: Vec<&str> = rel.trim_end_matches(".rs").split('/').collect();
        if parts.len() == 2 && HOMES.contains(&parts[0]) && parts[1] == "mod" {
            continue;
        }
        let me = module_of(&parts);
        let me = me.as_str();
        let my_floor = floor_of(me).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in statements(&lines) {
            if line.trim() == "#[cfg(test)]"
                && lines
                    .get(n + 1)
                    .is_some_and(|l| l.trim().starts_with("mod tests"))
            {
                break;
            }
            for path in paths(&line) {
                // `super::` in a root file is the crate; in a directory's file, a sibling of the same module.
                let target: Vec<&str> = match (path[0].as_str(), parts.len()) {
                    ("super", 1) => path[1..].iter().map(String::as_str).collect(),
                    ("super", _) if parts.len() == 2 => std::iter::once(parts[0])
                        .chain(path[1..].iter().map(String::as_str))
                        .collect(),
                    ("super", _) => continue,
                    _ => path[1..].iter().map(String::as_str).collect(),
                };
                let module = module_of(&target);
                let module = module.as_str();
                let mut broken = |imported: String, rule: String| {
                    found.push((format!("src/{rel}"), imported, n + 1, rule))
                };
                if module == me {
                    let other = target.get(1).copied().unwrap_or_default();
                    let is_sibling = src().join(me).join(format!("{other}.rs")).exists();
                    if me == "probes" && rel != "probes/mod.rs" && is_sibling && parts[1] != other {
                        broken(
                            format!("probes::{other}"),
                            "probes/X imports no probes/Y".into(),
                        );
                    }
                    continue;
                }
                match floor_of(module) {
                    None => broken(module.into(), format!("`{module}` is on no floor")),
                    Some(f) if f <= my_floor => broken(
                        module.into(),
                        format!(
                            "floor {} ({me}) imports floor {} ({module}): imports point down",
                            my_floor + 1,
                            f + 1
                        ),
                    ),
                    Some(_) => {}
                }
            }
        }
    }
    found
}

#[test]
fn imports_follow_the_layering() {
    let found = violations();
    let debt: BTreeSet<(String, String)> = KNOWN_DEBT
        .iter()
        .map(|(f, m)| (f.to_string(), m.to_string()))
        .collect();
    let new: Vec<String> = found
        .iter()
        .filter(|(file, module, _, _)| !debt.contains(&(file.clone(), module.clone())))
        .map(|(file, module, line, rule)| format!("{file}:{line}: imports {module}: {rule}"))
        .collect();
    assert!(
        new.is_empty(),
        "imports against the layering (tests/architecture.rs, ARCHITECTURE.md):\n{}",
        new.join("\n")
    );
    let seen: BTreeSet<(String, String)> = found
        .into_iter()
        .map(|(file, module, _, _)| (file, module))
        .collect();
    let paid: Vec<String> = debt
        .difference(&seen)
        .map(|(file, module)| format!("{file} → {module}"))
        .collect();
    assert!(
        paid.is_empty(),
        "no longer imported: delete from KNOWN_DEBT in tests/architecture.rs:\n{}",
        paid.join("\n")
    );
}

/// Every root module and directory of `src/` is on exactly one floor, and every floor's module exists: a new
/// module is placed on the map when it is added.
#[test]
fn every_module_is_on_one_floor() {
    let mut on_floors: Vec<&str> = FLOORS
        .iter()
        .flat_map(|(_, ms)| ms.iter().copied())
        .collect();
    let count = on_floors.len();
    on_floors.sort();
    on_floors.dedup();
    assert_eq!(on_floors.len(), count, "a module on two floors");
    let mut modules: Vec<String> = std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
        .flat_map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            if !HOMES.contains(&name.as_str()) {
                return vec![name];
            }
            std::fs::read_dir(&p)
                .unwrap()
                .map(|e| {
                    e.unwrap()
                        .path()
                        .file_stem()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                })
                .filter(|file| file != "mod")
                .map(|file| format!("{name}::{file}"))
                .collect()
        })
        .filter(|m| m != "lib")
        .collect();
    modules.sort();
    modules.dedup();
    assert_eq!(
        modules, on_floors,
        "src/ and FLOORS in tests/architecture.rs list different modules"
    );
}

#[test]
fn architecture_md_shows_these_rules() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.contains(&rules_text()),
        "ARCHITECTURE.md must show the layering as tests/architecture.rs has it:\n{}",
        rules_text()
    );
}

/// Inside `nccl/`, the reader feeds sinks and the summary is one: the summary never imports the reader (an
/// import circle issue 30 found closed twice).
#[test]
fn the_nccl_summary_does_not_import_the_reader() {
    let text = std::fs::read_to_string(src().join("nccl/summary.rs")).unwrap();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for path in paths(line) {
            let names_reader = match path.as_slice() {
                [root, reader, ..] if root == "super" => reader == "reader",
                [root, nccl, reader, ..] if root == "crate" => nccl == "nccl" && reader == "reader",
                _ => false,
            };
            assert!(!names_reader, "nccl/summary.rs imports the reader: {line}");
        }
    }
}

#[test]
fn paths_reads_groups_and_skips_lookalikes() {
    assert_eq!(
        paths("use crate::{host::Host, model, sysfs::{pci, net}};"),
        vec![
            vec!["crate", "host", "Host"],
            vec!["crate", "model"],
            vec!["crate", "sysfs"],
        ]
    );
    assert_eq!(
        paths("let x = crate::probes::find(id);"),
        vec![vec!["crate", "probes", "find"]]
    );
    assert_eq!(
        paths("use super::efa_devices::no_rc;"),
        vec![vec!["super", "efa_devices", "no_rc"]]
    );
    assert!(paths("use fabric_preflight::probes;").is_empty());
    assert!(paths("my_crate::x();").is_empty());
}
