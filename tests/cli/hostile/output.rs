//! Hostile inputs: output.
