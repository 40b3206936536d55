//! Hostile inputs: profile.
