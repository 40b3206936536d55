//! One line on stderr naming the active check that is running: active checks run one at a time and each may
//! take seconds, so a person at a terminal sees what the run waits on. Never in pipes, logs or files.

use std::io::{IsTerminal, Write};

pub struct Progress {
    enabled: bool,
}

impl Progress {
    pub const OFF: Progress = Progress { enabled: false };

    /// On when stderr is a terminal, unless `--quiet`.
    pub fn on_terminal(quiet: bool) -> Progress {
        Progress {
            enabled: !quiet && std::io::stderr().is_terminal(),
        }
    }

    /// `running gds.read (active check 2 of 4)…`, replacing the previous line.
    pub fn active(&self, id: &str, n: usize, of: usize) {
        self.show(&format!("running {id} (active check {n} of {of})…"));
    }

    /// Removes the line, so that the report starts on a clean one.
    pub fn clear(&self) {
        self.show("");
    }

    fn show(&self, text: &str) {
        if self.enabled {
            // Carriage return and erase-line: the line is rewritten in place.
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{text}");
            let _ = err.flush();
        }
    }
}
