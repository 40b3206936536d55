//! Port counters (`ports/<n>/counters/*`, `hw_counters/*`): names, widths, saturation and values.

use super::{port_dir, real_dir};
use crate::host::Host;

/// One counter file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// `counters/symbol_error` or `hw_counters/out_of_buffer`.
    pub name: String,
    pub path: String,
    pub value: CounterValue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterValue {
    Value(u64),
    /// `N/A (no PMA)`: the driver says it has no value.
    NotAvailable(String),
    /// Listed, but not read: the caller did not want it.
    NotRead,
    Unreadable(String),
}

/// Bit width of a PMA counter (`counters/*`), for saturation. 64-bit and unknown ones: None.
pub fn counter_width(name: &str) -> Option<u32> {
    match name {
        "symbol_error"
        | "port_rcv_errors"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors"
        | "port_xmit_discards"
        | "VL15_dropped" => Some(16),
        "link_error_recovery"
        | "link_downed"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors" => Some(8),
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => Some(4),
        "port_xmit_wait" => Some(32),
        _ => None,
    }
}

/// A PMA counter stuck at its width maximum: its true value is unknown.
pub fn is_saturated(name: &str, value: u64) -> bool {
    counter_width(name).is_some_and(|bits| value == (1u64 << bits) - 1)
}

/// `counters/*` then `hw_counters/*` of one port. `hw_counters/lifespan` is a setting, not a counter. A
/// directory that cannot be listed is one entry named after it (`counters`), unreadable. Only the counters
/// `wanted` (by `group/name`) are read: some platforms log a firmware message per read. A wanted file holding
/// neither a count nor `N/A` is unreadable, never a missing value.
pub fn read_counters(
    host: &Host,
    dev: &str,
    port: u32,
    wanted: impl Fn(&str) -> bool,
) -> Vec<Counter> {
    let shown = port_dir(dev, port);
    let real = real_dir(host, &shown);
    let mut out = Vec::new();
    for group in ["counters", "hw_counters"] {
        // A driver without a PMA has no `counters/`; one that cannot be listed is kept as an unreadable entry.
        let names = match host.read_dir(&format!("{real}/{group}")) {
            Ok(n) => n,
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                out.push(Counter {
                    name: group.to_string(),
                    path: format!("{shown}/{group}"),
                    value: CounterValue::Unreadable(e.reason()),
                });
                continue;
            }
        };
        for name in names {
            if group == "hw_counters" && name == "lifespan" {
                continue;
            }
            let path = format!("{shown}/{group}/{name}");
            let full = format!("{group}/{name}");
            let value = if !wanted(&full) {
                CounterValue::NotRead
            } else {
                match host.read_value(&format!("{real}/{group}/{name}")) {
                    Ok(t) => match t.trim().parse() {
                        Ok(v) => CounterValue::Value(v),
                        Err(_) if t.starts_with("N/A") => CounterValue::NotAvailable(t),
                        Err(_) => CounterValue::Unreadable(format!("<not a count: {t:?}>")),
                    },
                    Err(e) => CounterValue::Unreadable(e.reason()),
                }
            };
            out.push(Counter {
                name: full,
                path,
                value,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::infiniband::unreadable;

    /// A judged counter holding garbage was "not available" and the port passed.
    #[test]
    fn garbled_counter_is_unreadable_not_unavailable() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let file = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/ports/1/hw_counters/rcvd_seq_err");
        std::fs::write(&file, "garbage?\n").unwrap();
        let host = Host::at(dir.path()).unwrap();
        let counters = read_counters(&host, "rxe0", 1, |n| n == "hw_counters/rcvd_seq_err");
        let c = counters
            .iter()
            .find(|c| c.name == "hw_counters/rcvd_seq_err")
            .unwrap();
        assert!(
            matches!(&c.value, CounterValue::Unreadable(w) if w.contains("garbage?")),
            "{c:?}"
        );
        assert!(counters
            .iter()
            .filter(|c| c.name != "hw_counters/rcvd_seq_err")
            .all(|c| c.value == CounterValue::NotRead));
    }

    /// An unreadable counter directory is never "no counters" (rxe: rdma.counters skipped "no counters
    /// exposed"; HGX with `counters/` unreadable: passed on `hw_counters` alone).
    #[test]
    fn unreadable_counter_directories_are_reported() {
        for (tree, dir) in [
            ("rxe-vm", "sys/devices/virtual/infiniband/rxe0/ports/1/hw_counters"),
            ("hgx-healthy", "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0/infiniband/mlx5_0/ports/1/counters"),
        ] {
            let copy = crate::probes::testing::copy_scenario(tree);
            unreadable(copy.path(), dir);
            let r = crate::probes::testing::run_on_root(
                crate::probes::find("rdma.counters").unwrap(),
                copy.path(),
                "generic",
            );
            let port = r.iter().find(|x| x.subject.as_deref().is_some_and(|s| s.ends_with("0/1"))).unwrap();
            assert!(
                !matches!(port.status, crate::model::Status::Pass | crate::model::Status::Skip),
                "{tree}: {port:?}"
            );
        }
    }

    #[test]
    fn counters_at_width_maximum_are_saturated() {
        assert!(is_saturated("link_downed", 255));
        assert!(is_saturated("port_xmit_discards", 65535));
        assert!(is_saturated("port_xmit_wait", 4294967295));
        assert!(!is_saturated("symbol_error", 12));
        assert!(!is_saturated("port_rcv_data", u64::MAX));
    }
}
