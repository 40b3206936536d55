//! The udev database: `/run/udev/data/b<major>:<minor>` (block devices). cuFile looks up the block device
//! under a file there and refuses the file when `ID_FS_USAGE` is missing.

use std::collections::BTreeMap;

use crate::host::{Host, ReadError};

pub const RUN_UDEV: &str = "/run/udev";
pub const UDEV_DATA: &str = "/run/udev/data";

/// One device record. Lines are `<letter>:<value>`; only the ones a probe needs are kept apart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdevRecord {
    /// `E:KEY=VALUE` properties.
    pub properties: BTreeMap<String, String>,
    /// `S:` symlinks under `/dev`.
    pub symlinks: Vec<String>,
}

impl UdevRecord {
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties.get(key).map(String::as_str)
    }
}

/// Parses a record; lines of other letters and malformed lines are ignored (the format grows new letters).
pub fn parse_record(text: &str) -> UdevRecord {
    let mut record = UdevRecord::default();
    for line in text.lines() {
        let Some((letter, value)) = line.split_once(':') else {
            continue;
        };
        match letter {
            "E" => {
                if let Some((k, v)) = value.split_once('=') {
                    record.properties.insert(k.to_string(), v.to_string());
                }
            }
            "S" => record.symlinks.push(value.to_string()),
            _ => {}
        }
    }
    record
}

fn is_record_line(line: &str) -> bool {
    let mut chars = line.chars();
    line.is_empty()
        || matches!((chars.next(), chars.next()), (Some(c), Some(':')) if c.is_ascii_alphabetic())
}

/// `/run/udev/data/b254:0`.
pub fn block_record_path(major: u32, minor: u32) -> String {
    format!("{UDEV_DATA}/b{major}:{minor}")
}

/// What the database says about one block device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockLookup {
    Found(UdevRecord),
    /// The record file does not exist; `database_present` tells "no such entry" from "no database at all"
    /// (`/run/udev/data` missing: no udev daemon, or a container without the host's `/run/udev`).
    Missing {
        database_present: bool,
        run_udev_present: bool,
    },
    Unreadable(ReadError),
}

pub fn read_block(host: &Host, major: u32, minor: u32) -> BlockLookup {
    match host.read(&block_record_path(major, minor)) {
        // udev writes only `<letter>:<value>` lines: anything else is not its record.
        Ok(text) if text.lines().any(|l| !is_record_line(l)) => {
            BlockLookup::Unreadable(ReadError {
                path: block_record_path(major, minor),
                kind: crate::host::ReadErrorKind::Other(format!(
                    "unrecognised: {:?}",
                    text.lines()
                        .find(|l| !is_record_line(l))
                        .unwrap_or_default()
                )),
            })
        }
        Ok(text) => BlockLookup::Found(parse_record(&text)),
        Err(e) if e.is_not_found() => BlockLookup::Missing {
            database_present: host.is_dir(UDEV_DATA),
            run_udev_present: host.is_dir(RUN_UDEV),
        },
        Err(e) => BlockLookup::Unreadable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_properties_and_symlinks_parse() {
        let r = parse_record(
            "S:disk/by-uuid/5d0c2a8e\nI:1843216\nE:ID_FS_UUID=5d0c2a8e\nE:ID_FS_TYPE=ext4\nE:ID_FS_USAGE=filesystem\nG:systemd\nV:1\n",
        );
        assert_eq!(r.property("ID_FS_USAGE"), Some("filesystem"));
        assert_eq!(r.property("ID_FS_TYPE"), Some("ext4"));
        assert_eq!(r.symlinks, vec!["disk/by-uuid/5d0c2a8e"]);
    }

    #[test]
    fn record_value_with_equals_and_garbage_lines() {
        let r = parse_record("garbage\nE:ID_PATH=pci-0000:00:05.0=x\nE:broken\n");
        assert_eq!(r.property("ID_PATH"), Some("pci-0000:00:05.0=x"));
        assert_eq!(r.properties.len(), 1);
    }

    #[test]
    fn record_path_names_major_minor() {
        assert_eq!(block_record_path(254, 0), "/run/udev/data/b254:0");
    }

    #[test]
    fn missing_database_is_told_apart_from_missing_entry() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::at(dir.path()).unwrap();
        assert_eq!(
            read_block(&host, 254, 0),
            BlockLookup::Missing {
                database_present: false,
                run_udev_present: false
            }
        );
        std::fs::create_dir_all(dir.path().join("run/udev/data")).unwrap();
        assert_eq!(
            read_block(&host, 254, 0),
            BlockLookup::Missing {
                database_present: true,
                run_udev_present: true
            }
        );
        std::fs::write(
            dir.path().join("run/udev/data/b254:0"),
            "E:ID_FS_USAGE=filesystem\n",
        )
        .unwrap();
        assert!(
            matches!(read_block(&host, 254, 0), BlockLookup::Found(r) if r.property("ID_FS_USAGE") == Some("filesystem"))
        );
    }
}
