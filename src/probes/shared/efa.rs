//! EFA helpers for the probes that meet EFAs: where libfabric and libefa are worth asking, and what an RC
//! check says of the EFAs it leaves alone.

use crate::host::Host;
use crate::probe::{common, CheckResult};
use crate::rules::topology::PciTree;
use crate::sysfs::efa;

/// An EFA may be on this host: one is in the PCI tree (shared with the static probes, so nothing is read
/// twice), or part of the tree could not be read. Where not, EFA's libraries are left alone: libfabric would
/// load every provider it has on a node that has no EFA.
pub fn could_hold_an_efa(host: &Host) -> bool {
    PciTree::read(host).map_or(true, |tree| {
        !tree.unreadable.is_empty()
            || tree
                .nodes
                .iter()
                .any(|n| efa::is_efa(n.attrs.vendor, n.attrs.device))
    })
}

/// The result of an RC check (`rdma.loopback`, `gdr.loopback`) for the EFA devices it leaves alone.
pub fn no_rc(id: &str, efa: &[String]) -> CheckResult {
    CheckResult::skip(id, format!("{} ({} EFA device(s))", efa::NO_RC, efa.len()))
        .evidence("EFA devices left alone", efa.join(", "))
        .code(&common::EFA_LEFT_ALONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efa_libraries_are_asked_only_where_an_efa_could_be() {
        let at = |scenario: &str| {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/hosts")
                .join(scenario);
            could_hold_an_efa(&Host::at(&root).unwrap())
        };
        assert!(at("aws-p5en"));
        assert!(
            at("aws-p5en-efa-unbound"),
            "an EFA without its driver is still on the bus"
        );
        assert!(!at("hgx-healthy"));
        assert!(!at("rxe-vm"));
    }
}
