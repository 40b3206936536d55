//! RDMA devices: `/sys/class/infiniband/<dev>/...`.

use crate::host::{Host, ReadError};

pub const CLASS_INFINIBAND: &str = "/sys/class/infiniband";

/// Names under `/sys/class/infiniband` (`mlx5_0`, `mlx5_bond_0`, `rocep1s0f0`, …). Missing class dir = none.
pub fn read_device_names(host: &Host) -> Result<Vec<String>, ReadError> {
    match host.read_dir(CLASS_INFINIBAND) {
        Ok(names) => Ok(names),
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}
