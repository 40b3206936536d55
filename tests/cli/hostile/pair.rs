//! Hostile inputs: pair.
