//! The registry of finding codes, gathered from where they are declared (each probe's metadata, the engines
//! that judge, the common ones), and `explain CODE` / `explain` (every code) on it.

use std::fmt::Write as _;

use crate::exit::Exit;
use crate::probe::{common, FindingCode};

/// One code and the checks whose results may carry it (every check, for the common ones).
pub struct Registered {
    pub code: &'static FindingCode,
    /// None: any check (an unreadable input, a probe the runner ended).
    pub checks: Option<Vec<&'static str>>,
}

/// Every finding code, sorted by code.
pub fn registry() -> Vec<Registered> {
    let mut all: Vec<Registered> = common::ALL
        .iter()
        .map(|&code| Registered { code, checks: None })
        .collect();
    let declared = crate::probes::all()
        .iter()
        .map(|p| (p.id(), p.meta().findings))
        .chain(engines());
    for (check, codes) in declared {
        for &code in codes {
            match all.iter_mut().find(|r| r.code.code == code.code) {
                Some(Registered {
                    checks: Some(checks),
                    ..
                }) => checks.push(check),
                Some(_) => {}
                None => all.push(Registered {
                    code,
                    checks: Some(vec![check]),
                }),
            }
        }
    }
    all.sort_by_key(|r| r.code.code);
    all
}

/// The codes the engines outside `probes/` declare, by the check id their results carry.
fn engines() -> impl Iterator<Item = (&'static str, &'static [&'static FindingCode])> {
    crate::collective::judge::FINDINGS
        .iter()
        .chain(crate::collective::paths::FINDINGS)
        .chain(crate::collective::variant::FINDINGS)
        .chain(crate::pair::findings::FINDINGS)
        .chain(crate::isolate::report::FINDINGS)
        .copied()
}

/// The codes a result of `check` may carry: the common ones and its own.
pub fn codes_of(check: &str) -> Vec<&'static str> {
    registry()
        .into_iter()
        .filter(|r| r.checks.as_ref().is_none_or(|c| c.contains(&check)))
        .map(|r| r.code.code)
        .collect()
}

/// Whether `arg` is shaped like a finding code (`GDS003`) rather than a check id (`gds.config`).
pub fn looks_like_code(arg: &str) -> bool {
    let b = arg.as_bytes();
    b.len() == 6
        && b[..3].iter().all(u8::is_ascii_alphabetic)
        && b[3..].iter().all(u8::is_ascii_digit)
}

/// `explain CODE`: what the code means, its remediation step and the checks that report it.
pub fn explain(code: &str) -> anyhow::Result<u8> {
    let wanted = code.to_ascii_uppercase();
    let Some(r) = registry().into_iter().find(|r| r.code.code == wanted) else {
        anyhow::bail!(
            "unknown finding code `{code}` (`fabric-preflight explain` lists every code)"
        );
    };
    let text = entry(&r, "");
    Ok(super::emit(&super::list::fitted(&text), Exit::OK))
}

/// `explain` without an argument: every code, one line each.
pub fn list() -> anyhow::Result<u8> {
    let mut out = String::new();
    for r in registry() {
        let _ = writeln!(
            out,
            "{}  {:<15}  {:<15}  {}",
            r.code.code,
            step_name(r.code),
            checks_of(&r),
            r.code.title
        );
    }
    Ok(super::emit(&out, Exit::OK))
}

/// One code's documentation under a title line that starts with `heading`: the text `explain CODE` prints and
/// `docs/findings.md` holds.
fn entry(r: &Registered, heading: &str) -> String {
    let c = r.code;
    let mut out = String::new();
    let _ = writeln!(out, "{heading}{}: {}\n", c.code, c.title);
    let _ = writeln!(out, "Reported by: {}", checks_of(r));
    let _ = writeln!(
        out,
        "Remediation step: {}\n",
        match c.step {
            Some(step) => format!(
                "{step} (the ladder: {})",
                crate::probe::Remedy::LADDER.map(|s| s.as_str()).join(" → ")
            ),
            None =>
                "none (nothing to fix: the finding reports what is, or what was not read)".into(),
        }
    );
    let _ = writeln!(out, "{}", super::list::one_line(c.explanation));
    out
}

fn step_name(c: &FindingCode) -> &'static str {
    c.step.map_or("-", |s| s.as_str())
}

fn checks_of(r: &Registered) -> String {
    match &r.checks {
        None => "any check".into(),
        Some(checks) => checks.join(", "),
    }
}

/// `docs/findings.md`: every code's documentation, generated from the registry (a test keeps it so).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Finding codes\n\n\
         Generated from the registry by `UPDATE_GOLDEN=1 cargo test --lib findings`; do not edit. Each code is \
         stable: it never changes meaning and is never removed. `fabric-preflight explain CODE` prints the same \
         text.\n\n",
    );
    for r in registry() {
        out.push_str(&entry(&r, "## "));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::path::Path;

    fn repo(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }

    /// The family prefix of each check area; the common codes are `RUN` and `HWP`.
    fn family(check: &str) -> &'static str {
        match check.split('.').next().unwrap_or_default() {
            "driver" => "DRV",
            "gpu" => "GPU",
            "nvlink" => "NVL",
            "gdr" => "GDR",
            "gds" => "GDS",
            "rdma" => "RDM",
            "efa" => "EFA",
            "pcie" => "PCI",
            "topo" => "TOP",
            "nccl" => "NCC",
            "collective" => "COL",
            "pair" => "PAR",
            "isolate" => "ISO",
            other => panic!("no code family for check area `{other}`"),
        }
    }

    #[test]
    fn codes_are_unique_well_formed_and_of_their_family() {
        let mut seen = HashSet::new();
        for r in registry() {
            let c = r.code;
            assert!(
                looks_like_code(c.code),
                "{} is not three letters and three digits",
                c.code
            );
            assert_eq!(c.code, c.code.to_ascii_uppercase());
            assert!(seen.insert(c.code), "{} declared twice", c.code);
            assert!(
                !c.title.is_empty() && !c.explanation.is_empty(),
                "{} lacks text",
                c.code
            );
            match &r.checks {
                None => assert!(["RUN", "HWP"].contains(&&c.code[..3]), "{}", c.code),
                Some(checks) => {
                    for check in checks {
                        assert!(
                            c.code.starts_with(family(check)),
                            "{} raised by {check}",
                            c.code
                        );
                    }
                }
            }
        }
        // Two constants with one code (a copy-paste) would pass the lookup above: count them too.
        let declared: usize = common::ALL.len()
            + crate::probes::all()
                .iter()
                .map(|p| p.meta().findings.len())
                .sum::<usize>()
            + engines().map(|(_, c)| c.len()).sum::<usize>();
        let shared = registry()
            .iter()
            .filter_map(|r| r.checks.as_ref())
            .map(|c| c.len() - 1)
            .sum::<usize>();
        assert_eq!(registry().len() + shared, declared);
    }

    /// `docs/finding-codes.txt` pins every code ever released with its title: a code never disappears and
    /// never changes meaning; a new code is appended there.
    #[test]
    fn codes_are_pinned_append_only() {
        let path = repo("docs/finding-codes.txt");
        let pinned = std::fs::read_to_string(&path).unwrap_or_default();
        let registry = registry();
        let mut missing = Vec::new();
        for line in pinned
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (code, title) = line.split_once(' ').unwrap_or((line, ""));
            match registry.iter().find(|r| r.code.code == code) {
                None => missing.push(format!("{code} was removed")),
                Some(r) if r.code.title != title => missing.push(format!(
                    "{code} changed its title (its meaning): `{title}` → `{}`",
                    r.code.title
                )),
                Some(_) => {}
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
        let new: Vec<String> = registry
            .iter()
            .filter(|r| {
                !pinned
                    .lines()
                    .any(|l| l.split(' ').next() == Some(r.code.code))
            })
            .map(|r| format!("{} {}", r.code.code, r.code.title))
            .collect();
        if std::env::var_os("UPDATE_GOLDEN").is_some() && !new.is_empty() {
            let mut text = pinned.clone();
            for line in &new {
                text.push_str(line);
                text.push('\n');
            }
            std::fs::write(&path, text).unwrap();
            return;
        }
        assert!(
            new.is_empty(),
            "append these lines to {} (or run with UPDATE_GOLDEN=1):\n{}",
            path.display(),
            new.join("\n")
        );
    }

    #[test]
    fn docs_findings_md_is_generated_from_the_registry() {
        let path = repo("docs/findings.md");
        let want = markdown();
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is out of date: regenerate it with UPDATE_GOLDEN=1 cargo test --lib findings",
            path.display()
        );
    }

    #[test]
    fn codes_and_check_ids_are_told_apart() {
        assert!(looks_like_code("GDS003") && looks_like_code("run001"));
        for not in ["gds.config", "GDS03", "GDS0031", "G1S003", "", "ÄÖÜ123"] {
            assert!(!looks_like_code(not), "{not}");
        }
        assert!(codes_of("gds.config").contains(&"RUN001"));
    }
}
