//! Network interfaces: `/sys/class/net/<if>/{operstate,mtu}`.

use crate::host::{Host, ReadError, ReadErrorKind};

pub const CLASS_NET: &str = "/sys/class/net";

/// Interface names under `/sys/class/net` (`eth0`, `ib0`, `lo`, …). Missing class dir = none.
pub fn read_interface_names(host: &Host) -> Result<Vec<String>, ReadError> {
    match host.read_dir(CLASS_NET) {
        Ok(names) => Ok(names),
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

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

/// Netdevs of a PCI function (`/sys/bus/pci/devices/<bdf>/net/*`); none without a `net/` directory, the error
/// when it cannot be listed.
pub fn read_pci_netdevs(host: &Host, bdf: &str) -> Result<Vec<String>, ReadError> {
    crate::host::optional(host.read_dir(&format!("{}/{bdf}/net", super::pci::PCI_DEVICES)))
        .map(Option::unwrap_or_default)
}
