//! Kernel identity and process limits: `/proc/sys/kernel/*`, `/proc/self/limits`, `/proc/self/status`.

use crate::host::{Host, ReadError};

pub const OSRELEASE: &str = "/proc/sys/kernel/osrelease";
pub const HOSTNAME: &str = "/proc/sys/kernel/hostname";

/// `6.18.44-fc-v657-gpu` → (6, 18). None when the release does not start with `major.minor`.
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn read_release(host: &Host) -> Result<String, ReadError> {
    super::stable::read(host, OSRELEASE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_with_suffix() {
        assert_eq!(parse_release("6.18.44-fc-v657-gpu"), Some((6, 18)));
        assert_eq!(parse_release("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(parse_release("garbage"), None);
    }
}
