//! NCCL's configuration files and the environment, merged as NCCL merges them.
//!
//! From NCCL's `src/misc/param.cc` (`initEnvFunc`, `setEnvFile`; the same from 2.3 to 2.29) and
//! `src/os/linux.cc` (`setenv(name, value, 0)`):
//! - NCCL applies the user's file first — `$NCCL_CONF_FILE` when set and not empty (2.23+), else
//!   `$HOME/.nccl.conf` — then `/etc/nccl.conf`. Each line sets a variable only if it is not set yet, so the
//!   environment wins over both files, the user's file over the system one, and within a file the first line
//!   for a name wins.
//! - A line is `NAME=value`: its `\n` and then one `\r` are dropped; a line starting with `#` is a comment; a
//!   line without `=` is skipped. Nothing is trimmed: `NCCL_IB_DISABLE = 1` sets a variable named
//!   `NCCL_IB_DISABLE ` that NCCL never reads.

use std::collections::BTreeMap;
use std::fmt;

/// The system-wide file, applied last.
pub const SYSTEM_FILE: &str = "/etc/nccl.conf";

/// Where a setting comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Env,
    /// `path:line` of a configuration file.
    File {
        path: String,
        line: usize,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Env => f.write_str("env"),
            Origin::File { path, line } => write!(f, "{path}:{line}"),
        }
    }
}

/// The value NCCL ends up with, and the lower-precedence ones it overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub value: String,
    pub origin: Origin,
    pub overridden: Vec<(Origin, String)>,
}

impl Setting {
    /// `/etc/nccl.conf:3 NCCL_IB_DISABLE`, `env NCCL_IB_DISABLE`: the evidence label.
    pub fn label(&self, name: &str) -> String {
        format!("{} {name}", self.origin)
    }

    /// ` (from /etc/nccl.conf:3, not set in the environment)`, or nothing for the environment.
    pub fn from_where(&self) -> String {
        match &self.origin {
            Origin::Env => String::new(),
            Origin::File { .. } => format!(" (from {}, not set in the environment)", self.origin),
        }
    }

    /// What to do to remove this setting.
    pub fn how_to_unset(&self, name: &str) -> String {
        match &self.origin {
            Origin::Env => format!("unset {name} in the job environment or image"),
            Origin::File { .. } => format!("delete the {name} line at {}", self.origin),
        }
    }
}

/// A line of a configuration file that does not do what it looks like, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineIssue {
    pub at: Origin,
    pub text: String,
    pub why: &'static str,
}

/// A file that is there, in the order NCCL applies it, with its text (read leniently: invalid UTF-8 repaired).
#[derive(Debug, Clone)]
pub struct ConfFile {
    pub path: String,
    pub text: String,
}

/// The environment and the files, merged.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    vars: BTreeMap<String, Setting>,
    pub issues: Vec<LineIssue>,
}

/// The user's file NCCL would read for `env`: `NCCL_CONF_FILE` (2.23+) when set and not empty, else
/// `$HOME/.nccl.conf`; `None` without either (NCCL then reads only the system file).
pub fn user_file(env: &BTreeMap<String, String>) -> Option<String> {
    match env.get("NCCL_CONF_FILE").filter(|f| !f.is_empty()) {
        Some(file) => Some(file.clone()),
        None => env
            .get("HOME")
            .map(|home| format!("{}/.nccl.conf", home.trim_end_matches('/'))),
    }
}

impl Settings {
    /// `files` in NCCL's order (the user's, then the system one).
    pub fn merge(env: &BTreeMap<String, String>, files: &[ConfFile]) -> Settings {
        let mut settings = Settings::default();
        for (name, value) in env {
            settings.vars.insert(
                name.clone(),
                Setting {
                    value: value.clone(),
                    origin: Origin::Env,
                    overridden: Vec::new(),
                },
            );
        }
        for file in files {
            for (index, raw) in file.text.split('\n').enumerate() {
                let at = Origin::File {
                    path: file.path.clone(),
                    line: index + 1,
                };
                let line = raw.strip_suffix('\r').unwrap_or(raw);
                if line.starts_with('#') || line.trim().is_empty() {
                    continue;
                }
                let issue = |why| LineIssue {
                    at: at.clone(),
                    text: line.chars().take(120).collect(),
                    why,
                };
                let Some((name, value)) = line.split_once('=') else {
                    settings.issues.push(issue("no `=`: NCCL skips the line"));
                    continue;
                };
                if name.trim_start().starts_with('#') {
                    // An indented comment: NCCL sets a variable nobody reads; harmless.
                    continue;
                }
                if name.is_empty() || name.contains(char::is_whitespace) {
                    settings.issues.push(issue(
                        "the name holds spaces (or is empty): NCCL takes them as part of the name and never reads it",
                    ));
                    continue;
                }
                match settings.vars.get_mut(name) {
                    Some(winner) => winner.overridden.push((at, value.to_string())),
                    None => {
                        settings.vars.insert(
                            name.to_string(),
                            Setting {
                                value: value.to_string(),
                                origin: at,
                                overridden: Vec::new(),
                            },
                        );
                    }
                }
            }
        }
        settings
    }

    pub fn get(&self, name: &str) -> Option<&Setting> {
        self.vars.get(name)
    }

    /// `NCCL_*` settings, by name.
    pub fn nccl(&self) -> impl Iterator<Item = (&String, &Setting)> {
        self.vars.iter().filter(|(k, _)| k.starts_with("NCCL_"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn file(path: &str, text: &str) -> ConfFile {
        ConfFile {
            path: path.into(),
            text: text.into(),
        }
    }

    #[test]
    fn environment_wins_then_the_user_file_then_the_system_file() {
        let files = [
            file("/root/.nccl.conf", "NCCL_NET_GDR_LEVEL=PHB\n"),
            file(
                SYSTEM_FILE,
                "NCCL_IB_DISABLE=1\nNCCL_NET_GDR_LEVEL=LOC\r\nNCCL_DEBUG=WARN\n",
            ),
        ];
        let s = Settings::merge(&env(&[("NCCL_DEBUG", "INFO")]), &files);
        let ib = s.get("NCCL_IB_DISABLE").unwrap();
        assert_eq!(
            (ib.value.as_str(), ib.origin.to_string()),
            ("1", "/etc/nccl.conf:1".into())
        );
        let gdr = s.get("NCCL_NET_GDR_LEVEL").unwrap();
        assert_eq!(gdr.value, "PHB");
        assert_eq!(
            gdr.overridden,
            vec![(
                Origin::File {
                    path: SYSTEM_FILE.into(),
                    line: 2
                },
                "LOC".into()
            )]
        );
        let debug = s.get("NCCL_DEBUG").unwrap();
        assert_eq!(
            (debug.value.as_str(), &debug.origin),
            ("INFO", &Origin::Env)
        );
        assert_eq!(debug.overridden.len(), 1);
    }

    #[test]
    fn first_line_for_a_name_wins_within_a_file() {
        let s = Settings::merge(
            &env(&[]),
            &[file(
                SYSTEM_FILE,
                "NCCL_IB_HCA=mlx5_0\nNCCL_IB_HCA=mlx5_9\n",
            )],
        );
        let hca = s.get("NCCL_IB_HCA").unwrap();
        assert_eq!(hca.value, "mlx5_0");
        assert_eq!(hca.overridden[0].1, "mlx5_9");
    }

    #[test]
    fn comments_blank_and_garbage_lines_are_reported_not_applied() {
        let text = "# a comment\n\n   \n  # NCCL_IB_DISABLE=1\nNCCL_IB_DISABLE = 1\ngarbage\n=1\n\u{fffd}\u{fffd}\nNCCL_NET=IB";
        let s = Settings::merge(&env(&[]), &[file(SYSTEM_FILE, text)]);
        assert!(s.get("NCCL_IB_DISABLE").is_none());
        assert_eq!(
            s.get("NCCL_NET").unwrap().origin.to_string(),
            "/etc/nccl.conf:9"
        );
        let lines: Vec<String> = s.issues.iter().map(|i| i.at.to_string()).collect();
        assert_eq!(
            lines,
            [
                "/etc/nccl.conf:5",
                "/etc/nccl.conf:6",
                "/etc/nccl.conf:7",
                "/etc/nccl.conf:8"
            ]
        );
    }

    #[test]
    fn the_user_file_is_nccl_conf_file_else_home() {
        assert_eq!(
            user_file(&env(&[
                ("HOME", "/home/ml/"),
                ("NCCL_CONF_FILE", "/opt/job/nccl.conf")
            ])),
            Some("/opt/job/nccl.conf".into())
        );
        assert_eq!(
            user_file(&env(&[("HOME", "/home/ml/"), ("NCCL_CONF_FILE", "")])),
            Some("/home/ml/.nccl.conf".into())
        );
        assert_eq!(user_file(&env(&[])), None);
    }
}
