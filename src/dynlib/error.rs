//! What a run-time-loaded library said when it did not do what was asked: which library, which call, the
//! library's own code and words. Verdicts are taken on `kind` and `code`, never on the text.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::Library;

/// How far the library got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// dlopen failed: the library is not installed or not mounted (the text is the loader's own).
    NotLoaded,
    /// The library loaded but lacks an entry point this tool calls (too old, or not the real library).
    MissingSymbol,
    /// A call returned an error (`code` is the library's status when it has one).
    Failed,
}

/// A library error: `library`, `call` and `code` are for deciding, `text` is for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibError {
    pub library: Library,
    pub kind: ErrorKind,
    /// The entry point (with its argument where that helps: `cuMemAlloc_v2(1024 bytes)`), or `dlopen`.
    pub call: String,
    /// The library's status code (`CUresult`, `nvmlReturn_t`, errno), when it returned one.
    pub code: Option<i64>,
    /// The library's own words: `CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (system has unsupported display driver /
    /// cuda driver combination)`, or the loader's message.
    pub text: String,
}

impl LibError {
    pub fn not_loaded(library: Library, loader_message: impl Into<String>) -> Self {
        LibError {
            library,
            kind: ErrorKind::NotLoaded,
            call: "dlopen".into(),
            code: None,
            text: loader_message.into(),
        }
    }

    /// `text` says which symbols and why they matter.
    pub fn missing_symbol(library: Library, symbols: &str, text: impl Into<String>) -> Self {
        LibError {
            library,
            kind: ErrorKind::MissingSymbol,
            call: symbols.into(),
            code: None,
            text: text.into(),
        }
    }

    pub fn failed(
        library: Library,
        call: impl Into<String>,
        code: Option<i64>,
        text: impl Into<String>,
    ) -> Self {
        LibError {
            library,
            kind: ErrorKind::Failed,
            call: call.into(),
            code,
            text: text.into(),
        }
    }

    pub fn is_not_loaded(&self) -> bool {
        self.kind == ErrorKind::NotLoaded
    }
}

impl fmt::Display for LibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::NotLoaded | ErrorKind::MissingSymbol => f.write_str(&self.text),
            ErrorKind::Failed => write!(f, "{}: {}", self.call, self.text),
        }
    }
}

impl std::error::Error for LibError {}

impl From<LibError> for String {
    fn from(e: LibError) -> String {
        e.to_string()
    }
}

/// The innermost cause of an error: libloading says "dlopen failed" and keeps the loader's own text
/// (`libnvidia-ml.so.1: cannot open shared object file: No such file or directory`) in `source()`.
pub fn innermost_message(e: &dyn std::error::Error) -> String {
    let mut current = e;
    while let Some(cause) = current.source() {
        current = cause;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_keeps_the_call_and_the_library_words() {
        let e = LibError::failed(
            Library::Cuda,
            "cuInit",
            Some(803),
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (system has unsupported display driver / cuda driver combination)",
        );
        assert_eq!(
            e.to_string(),
            "cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (system has unsupported display driver / cuda driver combination)"
        );
        let e = LibError::not_loaded(
            Library::Cuda,
            "libcuda.so.1: cannot open shared object file",
        );
        assert_eq!(
            e.to_string(),
            "libcuda.so.1: cannot open shared object file"
        );
        assert!(e.is_not_loaded());
    }

    #[test]
    fn calls_belong_to_their_library() {
        assert_eq!(Library::owning("nvmlInit_v2"), Some(Library::Nvml));
        assert_eq!(Library::owning("cuFileDriverOpen"), Some(Library::Cufile));
        assert_eq!(
            Library::owning("dlopen(libcufile.so.0)"),
            Some(Library::Cufile)
        );
        assert_eq!(Library::owning("cuMemAlloc_v2"), Some(Library::Cuda));
        assert_eq!(Library::owning("dlopen(libcuda)"), Some(Library::Cuda));
        assert_eq!(Library::owning("ibv_get_device_list"), Some(Library::Verbs));
        assert_eq!(Library::owning("mmap"), None);
    }

    #[test]
    fn round_trips_through_json() {
        let e = LibError::failed(
            Library::Nvml,
            "nvmlInit_v2",
            Some(18),
            "RM detects a driver/library version mismatch",
        );
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<LibError>(&json).unwrap(), e);
    }
}
