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

// --- GID table readers (nccl.env: NCCL_IB_GID_INDEX). Self-contained so they merge beside other port readers.

/// Port numbers of an RDMA device (`/sys/class/infiniband/<dev>/ports/<n>`), ascending.
pub fn read_port_numbers(host: &Host, dev: &str) -> Result<Vec<u32>, ReadError> {
    let mut ports: Vec<u32> = host
        .read_dir(&format!("{CLASS_INFINIBAND}/{dev}/ports"))?
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    ports.sort_unstable();
    Ok(ports)
}

/// `InfiniBand` or `Ethernet` (RoCE), as the port's `link_layer` attribute says.
pub fn read_port_link_layer(host: &Host, dev: &str, port: u32) -> Result<String, ReadError> {
    host.read(&format!("{CLASS_INFINIBAND}/{dev}/ports/{port}/link_layer"))
}

pub fn gid_path(dev: &str, port: u32, index: u32) -> String {
    format!("{CLASS_INFINIBAND}/{dev}/ports/{port}/gids/{index}")
}

pub fn gid_type_path(dev: &str, port: u32, index: u32) -> String {
    format!("{CLASS_INFINIBAND}/{dev}/ports/{port}/gid_attrs/types/{index}")
}

/// A GID as sysfs prints it (`fe80:0000:…`); `None` for an empty slot (all zeros).
pub fn parse_gid(text: &str) -> Option<&str> {
    let gid = text.trim();
    let empty = gid.bytes().all(|b| b == b'0' || b == b':');
    (!gid.is_empty() && !empty).then_some(gid)
}

/// GID `index` of a port; `None` when the slot is empty (zeros, or EINVAL as some kernels answer).
pub fn read_gid(
    host: &Host,
    dev: &str,
    port: u32,
    index: u32,
) -> Result<Option<String>, ReadError> {
    match host.read(&gid_path(dev, port, index)) {
        Ok(text) => Ok(parse_gid(&text).map(str::to_string)),
        Err(e) if e.kind == crate::host::ReadErrorKind::InvalidArgument => Ok(None),
        Err(e) => Err(e),
    }
}

/// `RoCE v2` or `IB/RoCE v1` for a populated slot; `None` for an empty slot (the kernel answers EINVAL).
pub fn read_gid_type(
    host: &Host,
    dev: &str,
    port: u32,
    index: u32,
) -> Result<Option<String>, ReadError> {
    match host.read(&gid_type_path(dev, port, index)) {
        Ok(text) => Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty())),
        Err(e) if e.kind == crate::host::ReadErrorKind::InvalidArgument => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod gid_tests {
    use super::*;

    #[test]
    fn gid_all_zero_is_empty_slot() {
        assert_eq!(parse_gid("0000:0000:0000:0000:0000:0000:0000:0000\n"), None);
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:0a01:0203"),
            Some("0000:0000:0000:0000:0000:ffff:0a01:0203")
        );
        assert_eq!(parse_gid(""), None);
    }
}
