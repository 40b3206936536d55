//! Recorded answers of vendor libraries (NVML, CUDA, cuFile, verbs), so a recorded tree replays a real
//! machine's library answers the way `--root` replays its files.
//!
//! A probe that calls a library gathers what the library said into one serialisable value per key and asks
//! [`Answers::obtain`] for it: replayed from `<root>/vendor-answers.json` when the root has one, else taken from
//! what the runner gathered for the whole run ([`Answers::provide`]), otherwise collected live (and kept, so
//! `snapshot` can write it out). The recording is parsed once per run; each probe asks through its own
//! [`Answers::view`], which shares the recording and the gathered answers and tells whether that probe consulted
//! them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::host::{self, Host};
use crate::input;
use crate::model::AnswerSource;

/// File name of the recording, at the top of a recorded root (beside `proc/` and `sys/`).
pub const ANSWERS_FILE: &str = "vendor-answers.json";

#[derive(Debug, Default)]
pub struct Answers {
    replay: Option<Arc<(PathBuf, BTreeMap<String, Value>)>>,
    /// Answers gathered once for the whole run (the facts several probes judge), shared by every view.
    gathered: Arc<Mutex<BTreeMap<String, Value>>>,
    recorded: Mutex<BTreeMap<String, Value>>,
    /// Sources not asked this run (their hardware is absent): asking for them is an error, never a library call.
    not_asked: Arc<Mutex<BTreeMap<String, String>>>,
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

    /// Replays `<root>/vendor-answers.json` when the root is a recorded tree that has one, read through the root
    /// like every other file of the tree (a link in it resolves inside the root; only a regular file is read).
    pub fn for_host(host: &Host) -> anyhow::Result<Self> {
        if host.is_live() {
            return Ok(Self::live());
        }
        let Some(bytes) = host::optional(
            host.read_recording_file(&format!("/{ANSWERS_FILE}"), MAX_ANSWERS_BYTES),
        )?
        else {
            return Ok(Self::live());
        };
        Self::parse(&host.root().join(ANSWERS_FILE), &bytes)
    }

    /// A recording outside any tree (tests, `pair`'s inventory of a peer).
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let bytes = input::read_bytes(path, MAX_ANSWERS_BYTES)
            .with_context(|| format!("reading {}", path.display()))?;
        Self::parse(path, &bytes)
    }

    fn parse(path: &Path, bytes: &[u8]) -> anyhow::Result<Self> {
        let map: BTreeMap<String, Value> = serde_json::from_slice(bytes)
            .with_context(|| format!("parsing recorded answers {}", path.display()))?;
        Ok(Answers {
            replay: Some(Arc::new((path.to_path_buf(), map))),
            ..Self::default()
        })
    }

    /// The same recording and gathered answers for one probe, with its own record of what it consulted and
    /// collected (absorb the latter back with [`Answers::absorb`]).
    pub fn view(&self) -> Answers {
        Answers {
            replay: self.replay.clone(),
            gathered: self.gathered.clone(),
            not_asked: self.not_asked.clone(),
            ..Self::default()
        }
    }

    /// `key` is not asked this run, for `why`: [`Answers::obtain`] then says so instead of calling the library.
    pub fn not_asked(&self, key: &str, why: &str) {
        if let Ok(mut not_asked) = self.not_asked.lock() {
            not_asked.insert(key.to_string(), why.to_string());
        }
    }

    /// `answers` gathered for the whole run (by the runner, or handed to a child process): `obtain` returns
    /// them without collecting, to every view. Kept for `snapshot` here too.
    pub fn provide(&self, answers: BTreeMap<String, Value>) {
        for (key, value) in &answers {
            self.record(key, value);
        }
        if let Ok(mut gathered) = self.gathered.lock() {
            gathered.extend(answers);
        }
    }

    /// These answers with `gathered` (a child process's job's) provided but not recorded again: the parent that
    /// gathered them keeps them.
    pub fn with_gathered(self, gathered: BTreeMap<String, Value>) -> Answers {
        Answers {
            gathered: Arc::new(Mutex::new(gathered)),
            ..self
        }
    }

    /// The gathered answers under `keys`, for a child process's job.
    pub fn gathered_for<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> BTreeMap<String, Value> {
        let Ok(gathered) = self.gathered.lock() else {
            return BTreeMap::new();
        };
        keys.into_iter()
            .filter_map(|k| gathered.get(k).map(|v| (k.to_string(), v.clone())))
            .collect()
    }

    /// The answer stored under `key`: replayed when recorded, else `collect()`ed now and kept for `snapshot`.
    /// Err when the recording exists but lacks the key or holds a value of another shape.
    pub fn obtain<T, F>(&self, key: &str, collect: F) -> Result<Obtained<T>, String>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> T,
    {
        self.consulted.store(true, Ordering::Relaxed);
        if let Some(replay) = &self.replay {
            let (path, map) = replay.as_ref();
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
        if let Some(why) = self.not_asked.lock().ok().and_then(|n| n.get(key).cloned()) {
            return Err(format!("`{key}` was not asked this run: {why}"));
        }
        let gathered = self.gathered.lock().ok().and_then(|g| g.get(key).cloned());
        if let Some(value) = gathered {
            let value = serde_json::from_value(value)
                .map_err(|e| format!("answers `{key}` gathered this run are malformed: {e}"))?;
            return Ok(Obtained {
                value,
                replayed: false,
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
    fn gathered_answers_reach_every_view_without_collecting() {
        let answers = Answers::live();
        answers.provide(BTreeMap::from([("nvml".to_string(), Value::from(8))]));
        let view = answers.view();
        assert_eq!(view.source_if_consulted(), None);
        let got = view
            .obtain("nvml", || -> u32 { panic!("must not call the library") })
            .unwrap();
        assert_eq!((got.value, got.replayed), (8, false));
        assert_eq!(view.source_if_consulted(), Some(AnswerSource::Live));
        // Kept for snapshot once, by the run's answers, not again by each view.
        assert!(view.take_recorded().is_empty());
        assert_eq!(answers.take_recorded().get("nvml"), Some(&Value::from(8)));
        assert_eq!(
            answers.gathered_for(["nvml", "verbs"]),
            BTreeMap::from([("nvml".to_string(), Value::from(8))])
        );
    }

    #[test]
    fn a_view_shares_the_recording_parsed_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ANSWERS_FILE), r#"{"nvml": 8}"#).unwrap();
        let answers = Answers::for_host(&Host::at(dir.path()).unwrap()).unwrap();
        std::fs::remove_file(dir.path().join(ANSWERS_FILE)).unwrap();
        let view = answers.view();
        assert_eq!(view.source(), AnswerSource::Recorded);
        assert_eq!(view.obtain("nvml", || 0u32).unwrap().value, 8);
        assert_eq!(
            answers.source_if_consulted(),
            None,
            "the view consulted, not the run"
        );
    }

    #[test]
    fn a_recording_is_read_through_the_root_and_only_as_a_bounded_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let answers = dir.path().join(ANSWERS_FILE);
        let host = Host::at(dir.path()).unwrap();
        // A link out of the tree resolves inside it, where there is no /dev/zero: nothing to replay.
        std::os::unix::fs::symlink("/dev/zero", &answers).unwrap();
        assert!(Answers::for_host(&host).unwrap().replay.is_none());
        std::fs::remove_file(&answers).unwrap();
        std::fs::File::create(&answers)
            .unwrap()
            .set_len(MAX_ANSWERS_BYTES + 1)
            .unwrap();
        let err = Answers::for_host(&Host::at(dir.path()).unwrap()).unwrap_err();
        assert!(format!("{err:#}").contains("<larger than"), "{err:#}");
        std::fs::remove_file(&answers).unwrap();
        let c = std::ffi::CString::new(answers.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = Answers::for_host(&Host::at(dir.path()).unwrap()).unwrap_err();
        assert!(
            format!("{err:#}").contains("<a FIFO, not a regular file>"),
            "{err:#}"
        );
    }
}
