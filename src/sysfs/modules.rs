//! Kernel modules: `/proc/modules` (loadable modules) and `/sys/module/<name>` (also built-ins).

use crate::host::{optional, Host, ReadError};
use crate::sysfs::stable;

pub const PROC_MODULES: &str = "/proc/modules";
pub const SYS_MODULE: &str = "/sys/module";

/// One `/proc/modules` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleLine {
    pub name: String,
    pub size: u64,
    /// `None` when the kernel has no module unloading (`-`).
    pub refcount: Option<u64>,
    pub users: Vec<String>,
    /// `Live`, `Loading`, `Unloading`.
    pub state: String,
    /// Taint letters without parentheses (`OE`), empty when none.
    pub taint: String,
}

impl ModuleLine {
    pub fn is_live(&self) -> bool {
        self.state == "Live"
    }
}

/// A line that does not have the six fields of the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    pub line_number: usize,
    pub text: String,
}

/// Parses `/proc/modules`. `procfs` rejects the whole file when refcount is `-` (kernels without module unload,
/// like the H200 VM); this accepts it, and keeps going past a malformed line (returned separately).
pub fn parse_proc_modules(text: &str) -> (Vec<ModuleLine>, Vec<BadLine>) {
    let mut modules = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Some(m) => modules.push(m),
            None => bad.push(BadLine {
                line_number: i + 1,
                text: line.chars().take(120).collect(),
            }),
        }
    }
    (modules, bad)
}

fn parse_line(line: &str) -> Option<ModuleLine> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 6 {
        return None;
    }
    let name = fields[0];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return None;
    }
    let size = fields[1].parse().ok()?;
    let refcount = match fields[2] {
        "-" => None,
        n => Some(n.parse().ok()?),
    };
    let users = match fields[3] {
        "-" => Vec::new(),
        list => list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    };
    let state = fields[4].to_string();
    let taint = fields
        .get(6)
        .map(|t| t.trim_start_matches('(').trim_end_matches(')').to_string())
        .unwrap_or_default();
    Some(ModuleLine {
        name: name.to_string(),
        size,
        refcount,
        users,
        state,
        taint,
    })
}

/// What the kernel says about one module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleState {
    pub name: String,
    /// Its `/proc/modules` line, when it is a loaded loadable module.
    pub line: Option<ModuleLine>,
    /// `/sys/module/<name>` exists (loadable and loaded, or built in with parameters/version/driver).
    pub in_sysfs: bool,
    /// `/sys/module/<name>/version`.
    pub version: Option<String>,
}

impl ModuleState {
    /// Loaded and usable: a `Live` line, or a built-in (sysfs directory without a line).
    pub fn is_loaded(&self) -> bool {
        match &self.line {
            Some(line) => line.is_live(),
            None => self.in_sysfs,
        }
    }

    /// Evidence lines (`path = value`): its `/proc/modules` line and its `/sys/module` directory.
    pub fn evidence(&self) -> Vec<String> {
        let line = match &self.line {
            Some(l) if l.taint.is_empty() => format!("{} {}", l.name, l.state),
            Some(l) => format!("{} {} ({})", l.name, l.state, l.taint),
            None => "<no line>".into(),
        };
        let dir = match (self.in_sysfs, &self.version) {
            (true, Some(v)) => format!("present, version {v}"),
            (true, None) => "present".into(),
            (false, _) => "<missing>".into(),
        };
        vec![
            format!("{PROC_MODULES} [{}] = {line}", self.name),
            format!("{SYS_MODULE}/{} = {dir}", self.name),
        ]
    }
}

/// The loaded-module table, read once and asked about many modules.
#[derive(Debug, Clone, Default)]
pub struct Modules {
    pub lines: Vec<ModuleLine>,
    /// `/proc/modules` does not exist: a kernel without loadable modules (not an error).
    pub no_proc_modules: bool,
}

impl Modules {
    /// The host's module table, read once per host and shared by the probes that ask.
    pub fn read(host: &Host) -> Result<Self, ReadError> {
        host.shared(Self::read_uncached).as_ref().clone()
    }

    fn read_uncached(host: &Host) -> Result<Self, ReadError> {
        match host.read(PROC_MODULES) {
            Ok(text) => {
                let (lines, bad_lines) = parse_proc_modules(&text);
                // The module asked about may be the line that could not be read: "not loaded" would be a guess.
                if let Some(bad) = bad_lines.first() {
                    return Err(ReadError {
                        path: PROC_MODULES.into(),
                        kind: crate::host::ReadErrorKind::Other(format!(
                            "line {} unrecognised: {:?}",
                            bad.line_number, bad.text
                        )),
                    });
                }
                Ok(Modules {
                    lines,
                    no_proc_modules: false,
                })
            }
            Err(e) if e.is_not_found() => Ok(Modules {
                no_proc_modules: true,
                ..Default::default()
            }),
            Err(e) => Err(e),
        }
    }

    /// A module's state; its `version` file may be absent (built-ins, unversioned modules) but not unreadable.
    pub fn state(&self, host: &Host, name: &str) -> Result<ModuleState, ReadError> {
        let dir = format!("{SYS_MODULE}/{name}");
        Ok(ModuleState {
            name: name.to_string(),
            line: self.lines.iter().find(|l| l.name == name).cloned(),
            in_sysfs: host.is_dir(&dir),
            version: optional(stable::read(host, &format!("{dir}/version")))?
                .filter(|v| !v.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_refcount_dash_parses() {
        let (m, bad) = parse_proc_modules("nvidia 14299136 - - Live 0xffffffffc0400000 (O)\n");
        assert!(bad.is_empty());
        assert_eq!(m[0].name, "nvidia");
        assert_eq!(m[0].refcount, None);
        assert!(m[0].users.is_empty());
        assert_eq!(m[0].taint, "O");
        assert!(m[0].is_live());
    }

    #[test]
    fn modules_users_trailing_comma_parses() {
        let (m, _) = parse_proc_modules(
            "ib_core 495616 8 rdma_ucm,ib_uverbs,nvidia_peermem,mlx5_ib, Live 0xffffffffc0b10000\n",
        );
        assert_eq!(m[0].refcount, Some(8));
        assert_eq!(
            m[0].users,
            vec!["rdma_ucm", "ib_uverbs", "nvidia_peermem", "mlx5_ib"]
        );
        assert_eq!(m[0].taint, "");
    }

    #[test]
    fn modules_garbage_line_is_reported_not_fatal() {
        let (m, bad) =
            parse_proc_modules("garbage\nnvidia_peermem 16384 0 - Live 0x0 (OE)\nx y z q r s\n");
        assert_eq!(m.len(), 1);
        assert_eq!(
            bad.iter().map(|b| b.line_number).collect::<Vec<_>>(),
            vec![1, 3]
        );
    }

    #[test]
    fn modules_unloading_is_not_loaded() {
        let (m, _) = parse_proc_modules("nvidia_fs 262144 0 - Unloading 0x0 (OE)\n");
        let state = ModuleState {
            name: "nvidia_fs".into(),
            line: Some(m[0].clone()),
            in_sysfs: true,
            version: None,
        };
        assert!(!state.is_loaded());
    }
}
