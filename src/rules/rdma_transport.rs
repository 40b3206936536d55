//! The transport family of an RDMA port: InfiniBand, RoCE, iWARP or another. It comes from the device's
//! `node_type` first (the kernel's `rdma_node_get_transport`: an RNIC is iWARP whatever its link layer), and
//! from the link layer only for a channel adapter: `link_layer = Ethernet` alone does not make a port RoCE.
//! i40iw, irdma in iWARP mode, cxgb4, qedr in iWARP mode and siw are RNICs; irdma and qedr in RoCE mode, mlx5
//! and rxe are channel adapters.

use crate::sysfs::infiniband::parse_numbered;

/// `node_type` numbers (`enum rdma_node_type`, include/rdma/ib_verbs.h).
const NODE_CA: u32 = 1;
const NODE_RNIC: u32 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Infiniband,
    Roce,
    Iwarp,
    /// Neither (usNIC, `unspecified` devices such as EFA): the node type as the kernel names it.
    Other(String),
}

impl Transport {
    pub fn as_str(&self) -> &str {
        match self {
            Transport::Infiniband => "InfiniBand",
            Transport::Roce => "RoCE",
            Transport::Iwarp => "iWARP",
            Transport::Other(name) => name,
        }
    }
}

/// The transport of a port of a device whose `node_type` reads `node_type` (`4: RNIC`) and whose port's
/// `link_layer` reads `link_layer`; `None` where `node_type` holds no value the kernel writes.
pub fn of(node_type: &str, link_layer: &str) -> Option<Transport> {
    let (number, name) = parse_numbered(node_type)?;
    Some(match number {
        NODE_RNIC => Transport::Iwarp,
        NODE_CA if link_layer == "Ethernet" => Transport::Roce,
        NODE_CA if link_layer == "InfiniBand" => Transport::Infiniband,
        _ => Transport::Other(name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_type_decides_before_the_link_layer() {
        assert_eq!(of("4: RNIC", "Ethernet"), Some(Transport::Iwarp));
        assert_eq!(of("4: RNIC\n", "InfiniBand"), Some(Transport::Iwarp));
        assert_eq!(of("1: CA", "Ethernet"), Some(Transport::Roce));
        assert_eq!(of("1: CA", "InfiniBand"), Some(Transport::Infiniband));
        assert_eq!(
            of("7: unspecified", "Unknown"),
            Some(Transport::Other("unspecified".into()))
        );
        assert_eq!(of("1: CA", "Unknown"), Some(Transport::Other("CA".into())));
        assert_eq!(of("garbage?", "Ethernet"), None);
    }
}
