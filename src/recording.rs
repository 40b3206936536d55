//! Recorded answers of vendor libraries (NVML, CUDA, cuFile, verbs), so a recorded tree replays a real
//! machine's library answers the way `--root` replays its files.
//!
//! A probe that calls a library gathers what the library said into one serialisable value per key and asks
//! [`Answers::obtain`] for it: replayed from `<root>/vendor-answers.json` when the root has one, otherwise
//! collected live (and kept, so `snapshot` can write it out).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::host::Host;
use crate::model::AnswerSource;

/// File name of the recording, at the top of a recorded root (beside `proc/` and `sys/`).
pub const ANSWERS_FILE: &str = "vendor-answers.json";

#[derive(Debug, Default)]
pub struct Answers {
    replay: Option<(PathBuf, BTreeMap<String, Value>)>,
    recorded: Mutex<BTreeMap<String, Value>>,
    /// Whether any answer was asked for, so the results built on them can say where they came from.
    consulted: AtomicBool,
}

/// A value and whether it was replayed from a recording.
#[derive(Debug, Clone)]
pub struct Obtained<T> {
    pub value: T,
    pub replayed: bool,
}

impl Answers {
    /// No recording: every answer is collected live.
    pub fn live() -> Self {
        Self::default()
    }

    /// Replays `<root>/vendor-answers.json` when the root is a recorded tree that has one.
    pub fn for_host(host: &Host) -> anyhow::Result<Self> {
        if host.is_live() {
            return Ok(Self::live());
        }
        let path = host.root().join(ANSWERS_FILE);
        if !path.exists() {
            return Ok(Self::live());
        }
        Self::from_file(&path)
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = read_capped(path).with_context(|| format!("reading {}", path.display()))?;
        let map: BTreeMap<String, Value> = serde_json::from_str(&text)
            .with_context(|| format!("parsing recorded answers {}", path.display()))?;
        Ok(Answers {
            replay: Some((path.to_path_buf(), map)),
            recorded: Mutex::default(),
            consulted: AtomicBool::new(false),
        })
    }

    /// The answer stored under `key`: replayed when recorded, else `collect()`ed now and kept for `snapshot`.
    /// Err when the recording exists but lacks the key or holds a value of another shape.
    pub fn obtain<T, F>(&self, key: &str, collect: F) -> Result<Obtained<T>, String>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> T,
    {
        self.consulted.store(true, Ordering::Relaxed);
        if let Some((path, map)) = &self.replay {
            let value = map.get(key).ok_or_else(|| {
                format!(
                    "the recording {} has no answers for `{key}`",
                    path.display()
                )
            })?;
            let value = serde_json::from_value(value.clone()).map_err(|e| {
                format!(
                    "recorded answers `{key}` in {} are malformed: {e}",
                    path.display()
                )
            })?;
            return Ok(Obtained {
                value,
                replayed: true,
            });
        }
        let value = collect();
        self.record(key, &value);
        Ok(Obtained {
            value,
            replayed: false,
        })
    }

    /// Where every answer comes from on this run: a recording, or the libraries themselves.
    pub fn source(&self) -> AnswerSource {
        if self.replay.is_some() {
            AnswerSource::Recorded
        } else {
            AnswerSource::Live
        }
    }

    /// [`Answers::source`] once an answer was asked for; `None` while none was.
    pub fn source_if_consulted(&self) -> Option<AnswerSource> {
        self.consulted
            .load(Ordering::Relaxed)
            .then(|| self.source())
    }

    pub fn record<T: Serialize>(&self, key: &str, value: &T) {
        if let Ok(v) = serde_json::to_value(value) {
            if let Ok(mut recorded) = self.recorded.lock() {
                recorded.insert(key.to_string(), v);
            }
        }
    }

    /// Adds answers a child process collected.
    pub fn absorb(&self, answers: BTreeMap<String, Value>) {
        if let Ok(mut recorded) = self.recorded.lock() {
            recorded.extend(answers);
        }
    }

    pub fn take_recorded(&self) -> BTreeMap<String, Value> {
        self.recorded
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}

/// A recording of a large node is a few hundred KiB; a tree whose file is huge, or a link to `/dev/zero`, must
/// not be read to its end.
const MAX_ANSWERS_BYTES: u64 = 64 << 20;

fn read_capped(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?
        .take(MAX_ANSWERS_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_ANSWERS_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_ANSWERS_BYTES >> 20
        )));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_answers_are_collected_and_kept() {
        let answers = Answers::live();
        assert_eq!(answers.source_if_consulted(), None);
        let got = answers.obtain("nvml", || 3u32).unwrap();
        assert_eq!((got.value, got.replayed), (3, false));
        assert_eq!(answers.source_if_consulted(), Some(AnswerSource::Live));
        assert_eq!(answers.take_recorded().get("nvml"), Some(&Value::from(3)));
    }

    #[test]
    fn recorded_answers_replay_without_calling() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ANSWERS_FILE), r#"{"nvml": 8}"#).unwrap();
        let answers = Answers::for_host(&Host::at(dir.path()).unwrap()).unwrap();
        let got = answers
            .obtain("nvml", || -> u32 { panic!("must not call the library") })
            .unwrap();
        assert_eq!((got.value, got.replayed), (8, true));
        assert_eq!(answers.source_if_consulted(), Some(AnswerSource::Recorded));
        assert!(answers
            .obtain::<u32, _>("cuda", || 0)
            .unwrap_err()
            .contains("no answers for `cuda`"));
    }

    #[test]
    fn endless_recording_is_refused_not_read_to_the_end() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join(ANSWERS_FILE)).unwrap();
        let err = Answers::for_host(&Host::at(dir.path()).unwrap()).unwrap_err();
        assert!(format!("{err:#}").contains("larger than 64 MiB"), "{err:#}");
    }
}
