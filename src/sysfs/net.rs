//! Network interfaces: `/sys/class/net/<if>`.

use crate::host::{Host, ReadError};

pub const CLASS_NET: &str = "/sys/class/net";

/// Interface names under `/sys/class/net` (`eth0`, `ib0`, `lo`, …). Missing class dir = none.
pub fn read_interface_names(host: &Host) -> Result<Vec<String>, ReadError> {
    match host.read_dir(CLASS_NET) {
        Ok(names) => Ok(names),
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}
