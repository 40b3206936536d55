//! What `build.rs` recorded about this build.

/// The git commit (`a1b2c3d4e5f6`), or `unknown` when built outside a git checkout.
pub const COMMIT: &str = env!("FABRIC_PREFLIGHT_COMMIT");

/// `--version`: `0.1.0 (a1b2c3d4e5f6 2026-12-01)`, the commit and its date.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("FABRIC_PREFLIGHT_BUILD"),
    ")"
);
