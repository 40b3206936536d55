//! RDMA devices: `/sys/class/infiniband/<dev>/...` (device attributes, ports, GIDs, counters) and the verbs
//! character devices (`/sys/class/infiniband_verbs`, `/dev/infiniband`).
//!
//! [`device`] lists devices and reads their attributes, [`port`] their ports, [`gid`] the ports' GIDs and
//! [`counters`] their counters; everything is re-exported here.

use crate::host::Host;

pub(crate) mod counters;
pub(crate) mod device;
pub(crate) mod gid;
pub(crate) mod port;

pub use counters::*;
pub use device::*;
pub use gid::*;
pub use port::*;

pub const CLASS_INFINIBAND: &str = "/sys/class/infiniband";
pub const CLASS_INFINIBAND_VERBS: &str = "/sys/class/infiniband_verbs";
pub const DEV_INFINIBAND: &str = "/dev/infiniband";

pub fn device_dir(dev: &str) -> String {
    format!("{CLASS_INFINIBAND}/{dev}")
}

pub fn port_dir(dev: &str, port: u32) -> String {
    format!("{CLASS_INFINIBAND}/{dev}/ports/{port}")
}

/// `1: CA` → (1, `CA`); also used for `state` (`4: ACTIVE`) and `phys_state` (`5: LinkUp`).
pub fn parse_numbered(text: &str) -> Option<(u32, String)> {
    let (n, name) = text.trim().split_once(':')?;
    Some((n.trim().parse().ok()?, name.trim().to_string()))
}

/// The canonical directory of a class path (`/sys/class/infiniband/mlx5_0` → `/sys/devices/.../mlx5_0`), so
/// that the many reads below it skip the class symlink; the class path itself when it cannot be resolved.
fn real_dir(host: &Host, dir: &str) -> String {
    host.canonical(dir).unwrap_or_else(|_| dir.to_string())
}

/// `path` (under the tree) replaced by a link to itself: listing it fails (ELOOP), for root too.
#[cfg(test)]
fn unreadable(root: &std::path::Path, path: &str) {
    let full = root.join(path);
    std::fs::remove_dir_all(&full).unwrap();
    std::os::unix::fs::symlink(full.file_name().unwrap(), &full).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_state_parses() {
        assert_eq!(parse_numbered("4: ACTIVE"), Some((4, "ACTIVE".into())));
        assert_eq!(parse_numbered("5: LinkUp"), Some((5, "LinkUp".into())));
        assert_eq!(
            parse_numbered("9: <unknown>"),
            Some((9, "<unknown>".into()))
        );
        assert_eq!(parse_numbered("ACTIVE"), None);
    }
}
