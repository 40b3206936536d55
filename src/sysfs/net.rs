//! Network interfaces: `/sys/class/net/<if>/{operstate,mtu}`.

use crate::host::{Host, ReadError, ReadErrorKind};

pub const CLASS_NET: &str = "/sys/class/net";

pub fn read_operstate(host: &Host, ifname: &str) -> Result<String, ReadError> {
    host.read(&format!("{CLASS_NET}/{ifname}/operstate"))
}

pub fn read_mtu(host: &Host, ifname: &str) -> Result<u32, ReadError> {
    let path = format!("{CLASS_NET}/{ifname}/mtu");
    let text = host.read(&path)?;
    text.trim().parse().map_err(|_| ReadError {
        path,
        kind: ReadErrorKind::Other(format!("not a number: {text:?}")),
    })
}

/// Netdevs of a PCI function (`/sys/bus/pci/devices/<bdf>/net/*`).
pub fn read_pci_netdevs(host: &Host, bdf: &str) -> Vec<String> {
    host.read_dir(&format!("{}/{bdf}/net", super::pci::PCI_DEVICES))
        .unwrap_or_default()
}
