//! `cufile.json`: cuFile's configuration. Not strict JSON: the shipped file has `//` comments (on their own
//! lines and after values, and whole commented-out keys) and documentation snippets carry trailing commas. Both
//! are blanked out with spaces before `serde_json` sees the text, so its line:column stay those of the file.

use std::fmt;

use serde_json::Value;

use crate::host::{Host, ReadError};

/// Where cuFile looks when `CUFILE_ENV_PATH_JSON` is unset (on Ubuntu a dpkg alternatives link).
pub const DEFAULT_PATH: &str = "/etc/cufile.json";
/// Environment variable that overrides [`DEFAULT_PATH`].
pub const ENV_PATH: &str = "CUFILE_ENV_PATH_JSON";

/// A parse error at a position of the original file (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// The parsed file. Accessors take dotted paths (`properties.allow_compat_mode`); a missing key is `None`,
/// which callers treat as cuFile's built-in default.
#[derive(Debug, Clone, PartialEq)]
pub struct CufileConfig {
    pub value: Value,
}

impl CufileConfig {
    pub fn get(&self, dotted: &str) -> Option<&Value> {
        dotted
            .split('.')
            .try_fold(&self.value, |v, key| v.as_object()?.get(key))
    }

    pub fn bool(&self, dotted: &str) -> Option<bool> {
        self.get(dotted)?.as_bool()
    }

    pub fn u64(&self, dotted: &str) -> Option<u64> {
        self.get(dotted)?.as_u64()
    }

    /// A string array; non-string members are rendered as JSON so they still show up in evidence.
    pub fn strings(&self, dotted: &str) -> Option<Vec<String>> {
        let items = self.get(dotted)?.as_array()?;
        Some(
            items
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
        )
    }

    /// The value as it would appear in evidence (`true`, `16384`, `["a"]`, `<unset>`).
    pub fn show(&self, dotted: &str) -> String {
        self.get(dotted)
            .map(|v| v.to_string())
            .unwrap_or_else(|| "<unset>".into())
    }
}

/// Replaces `//` and `/* */` comments outside strings, and commas directly before `}` or `]`, with spaces.
/// Newlines are kept, so positions in the result are positions in the input.
pub fn blank_comments_and_trailing_commas(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    let mut in_string = false;
    // Index of the last comma seen outside strings with only whitespace/comments after it so far.
    let mut pending_comma: Option<usize> = None;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                pending_comma = None;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let start = i;
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                let end = (i + 2).min(bytes.len());
                for c in &mut out[start..end] {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                i = end;
                continue;
            }
            b',' => pending_comma = Some(i),
            b'}' | b']' => {
                if let Some(c) = pending_comma.take() {
                    out[c] = b' ';
                }
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => pending_comma = None,
        }
        i += 1;
    }
    // Only ASCII bytes were replaced, by ASCII spaces: the result is still valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

pub fn parse(text: &str) -> Result<CufileConfig, JsonError> {
    let cleaned = blank_comments_and_trailing_commas(text);
    serde_json::from_str(&cleaned)
        .map(|value| CufileConfig { value })
        .map_err(|e| JsonError {
            line: e.line(),
            column: e.column(),
            message: e.to_string().split(" at line ").next().unwrap_or("").into(),
        })
}

/// The host path cuFile would read: `CUFILE_ENV_PATH_JSON` when set and non-empty, else `/etc/cufile.json`.
pub fn config_path(env_override: Option<&str>) -> String {
    env_override
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .unwrap_or(DEFAULT_PATH)
        .to_string()
}

/// Why the configuration could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    Read(ReadError),
    Parse(JsonError),
}

/// Reads and parses the file at `path` through the host (symlinks, absolute ones too, resolve inside the root).
pub fn read_config(host: &Host, path: &str) -> Result<CufileConfig, ConfigError> {
    let text = host.read(path).map_err(ConfigError::Read)?;
    parse(&text).map_err(ConfigError::Parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shape of the file cuFile 1.15 ships (`/usr/local/cuda-13.0/gds/cufile.json`), abridged.
    const SHIPPED: &str = r#"{
            // NOTE : Application can override custom configuration via export CUFILE_ENV_PATH_JSON=<filepath>
            // e.g : export CUFILE_ENV_PATH_JSON="/home/<xxx>/cufile.json"

            "logging": {
                            // log directory, if not enabled will create log file under current working directory
                            //"dir": "/home/<xxxx>",

                            // NOTICE|ERROR|WARN|INFO|DEBUG|TRACE (in decreasing order of severity)
                            "level": "ERROR"
            },

            "profile": {
                            // nvtx profiling on/off
                            "nvtx": false,
                            // cufile stats level(0-3)
                            "cufile_stats": 0
            },

            "execution" : {
                    // max number of workitems in the queue;
                    "max_io_queue_depth": 128,
                    "max_io_threads" : 4,
                    "parallel_io" : true,
                    "min_io_threshold_size_kb" : 8192,
                    "max_request_parallelism" : 4
            },

            "properties": {
                            // max IO chunk size (parameter should be multiples of 64K) used by cuFileRead/Write internally per IO request
                            "max_direct_io_size_kb" : 16384,
                            "max_device_cache_size_kb" : 131072,
                            "per_buffer_cache_size_kb": 1024,
                            "max_device_pinned_mem_size_kb" : 33554432,
                            "use_poll_mode" : false,
                            "poll_mode_max_size_kb": 4,
                            "use_pci_p2pdma": false,
                            "allow_compat_mode": true,
                            "gds_rdma_write_support": true,
                            "posix_pool_slab_size_kb" : [ 4, 1024, 16384],
                            "posix_pool_slab_count": [ 128, 64, 64],
                            "rdma_dev_addr_list": [ ],
                            //"rdma_dev_addr_list": [ "172.172.1.240", "172.172.1.241" ],
                            "rdma_load_balancing_policy": "RoundRobin",
                            "rdma_dynamic_routing": false,
                            "rdma_dynamic_routing_order": [ "GPU_MEM_NVLINKS", "GPU_MEM", "SYS_MEM", "P2P" ]
            },
            "fs": {
                    "generic": {
                            "posix_unaligned_writes" : false
                    },
                    "lustre": {
                            "posix_gds_min_kb" : 0
                    }
            },
            "denylist": {
                    "drivers":  [ ],
                    "devices": [ ],
                    "mounts": [ ],
                    "filesystems": [ ]
            }
}
"#;

    #[test]
    fn shipped_file_with_comments_parses() {
        let c = parse(SHIPPED).unwrap();
        assert_eq!(c.bool("properties.allow_compat_mode"), Some(true));
        assert_eq!(c.bool("properties.use_pci_p2pdma"), Some(false));
        assert_eq!(c.u64("properties.max_direct_io_size_kb"), Some(16384));
        assert_eq!(c.strings("properties.rdma_dev_addr_list"), Some(vec![]));
        assert_eq!(c.u64("execution.max_io_threads"), Some(4));
        assert_eq!(c.get("logging.dir"), None, "commented-out key stays out");
        assert_eq!(c.show("properties.force_compat_mode"), "<unset>");
    }

    #[test]
    fn slashes_inside_strings_are_not_comments() {
        let c = parse(r#"{"logging": {"dir": "//srv/logs", "x": "a /* b */ c"}} // tail"#).unwrap();
        assert_eq!(c.get("logging.dir").unwrap(), "//srv/logs");
        assert_eq!(c.get("logging.x").unwrap(), "a /* b */ c");
    }

    #[test]
    fn trailing_commas_are_tolerated() {
        let c = parse("{\n \"properties\": {\n  \"rdma_dev_addr_list\": [\"10.0.0.1\", ],\n  \"allow_compat_mode\": false, // off\n },\n}\n").unwrap();
        assert_eq!(
            c.strings("properties.rdma_dev_addr_list"),
            Some(vec!["10.0.0.1".into()])
        );
        assert_eq!(c.bool("properties.allow_compat_mode"), Some(false));
    }

    #[test]
    fn comma_inside_string_before_bracket_is_kept() {
        let c = parse(r#"{"a": ["x,]"]}"#).unwrap();
        assert_eq!(c.strings("a"), Some(vec!["x,]".into()]));
    }

    #[test]
    fn block_comment_keeps_line_numbers() {
        let err = parse("{\n/* one\n two */\n \"a\" 1\n}").unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        assert!(err.to_string().starts_with("4:"), "{err}");
    }

    #[test]
    fn syntax_error_reports_line_and_column() {
        let err =
            parse("{\n  // comment\n  \"properties\": {\n    \"allow_compat_mode\" true\n  }\n}")
                .unwrap_err();
        assert_eq!(err.line, 4);
        assert!(err.column > 20, "{err}");
        assert!(!err.message.contains("at line"), "{err}");
    }

    #[test]
    fn env_override_wins_when_non_empty() {
        assert_eq!(config_path(None), DEFAULT_PATH);
        assert_eq!(config_path(Some("  ")), DEFAULT_PATH);
        assert_eq!(
            config_path(Some("/opt/gds/cufile.json")),
            "/opt/gds/cufile.json"
        );
    }
}
