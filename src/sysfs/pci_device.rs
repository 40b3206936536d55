//! A PCI function's sysfs attributes that the GPU probes read: link speed and width
//! (`/sys/bus/pci/devices/<bdf>/{current,max}_link_{speed,width}`), NUMA node and local CPUs.

use crate::host::{Host, ReadResult};

pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// `/sys/bus/pci/devices/<bdf>/<attr>`.
pub fn attr_path(bdf: &str, attr: &str) -> String {
    format!("{PCI_DEVICES}/{bdf}/{attr}")
}

/// `32.0 GT/s PCIe` (kernel ≥ 5.7) or `32 GT/s` (older) → 32.0. `Unknown` / `Unknown speed` → None.
pub fn parse_link_speed_gts(text: &str) -> Option<f64> {
    let number = text.split_whitespace().next()?;
    number
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// PCIe generation of a per-lane rate: 2.5 → 1, 5 → 2, 8 → 3, 16 → 4, 32 → 5, 64 → 6.
pub fn generation_of_gts(gts: f64) -> Option<u32> {
    const RATES: [(f64, u32); 6] = [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
    ];
    RATES
        .iter()
        .find(|(rate, _)| (rate - gts).abs() < 0.01)
        .map(|(_, g)| *g)
}

/// The link as sysfs reports it; each field the raw text and its parsed value.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkAttrs {
    pub current_speed: ReadResult<String>,
    pub max_speed: ReadResult<String>,
    pub current_width: ReadResult<String>,
    pub max_width: ReadResult<String>,
}

impl LinkAttrs {
    pub fn read(host: &Host, bdf: &str) -> Self {
        let read = |attr: &str| host.read(&attr_path(bdf, attr));
        LinkAttrs {
            current_speed: read("current_link_speed"),
            max_speed: read("max_link_speed"),
            current_width: read("current_link_width"),
            max_width: read("max_link_width"),
        }
    }

    pub fn current_gen(&self) -> Option<u32> {
        gen_of(&self.current_speed)
    }
    pub fn max_gen(&self) -> Option<u32> {
        gen_of(&self.max_speed)
    }
    pub fn current_lanes(&self) -> Option<u32> {
        lanes_of(&self.current_width)
    }
    pub fn max_lanes(&self) -> Option<u32> {
        lanes_of(&self.max_width)
    }

    /// `path = value` lines for evidence.
    pub fn evidence(&self, bdf: &str) -> Vec<String> {
        [
            ("current_link_speed", &self.current_speed),
            ("current_link_width", &self.current_width),
            ("max_link_speed", &self.max_speed),
            ("max_link_width", &self.max_width),
        ]
        .iter()
        .map(|(attr, value)| {
            let shown = match value {
                Ok(v) => v.clone(),
                Err(e) => e.reason(),
            };
            format!("{} = {shown}", attr_path(bdf, attr))
        })
        .collect()
    }
}

fn gen_of(text: &ReadResult<String>) -> Option<u32> {
    text.as_ref()
        .ok()
        .and_then(|t| parse_link_speed_gts(t))
        .and_then(generation_of_gts)
}

fn lanes_of(text: &ReadResult<String>) -> Option<u32> {
    text.as_ref().ok().and_then(|t| t.trim().parse().ok())
}

/// `numa_node`: None for `-1` (unknown: VMs, single-node firmware).
pub fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// A CPU list (`0-15`, `0-55,112-167`, `3`) → CPU numbers. Malformed or absurd input → None.
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    /// Largest CPU number accepted (the kernel's NR_CPUS maximum); bounds the expansion of a bad range.
    const MAX_CPU: usize = 8191;
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let n: usize = part.trim().parse().ok()?;
                (n, n)
            }
        };
        if lo > hi || hi > MAX_CPU {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_speed_both_kernel_formats_parse() {
        assert_eq!(parse_link_speed_gts("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(parse_link_speed_gts("8 GT/s"), Some(8.0));
        assert_eq!(parse_link_speed_gts("2.5 GT/s PCIe"), Some(2.5));
        assert_eq!(parse_link_speed_gts("Unknown"), None);
        assert_eq!(parse_link_speed_gts("Unknown speed"), None);
        assert_eq!(generation_of_gts(32.0), Some(5));
        assert_eq!(generation_of_gts(2.5), Some(1));
        assert_eq!(generation_of_gts(3.0), None);
    }

    #[test]
    fn cpulist_ranges_expand_and_garbage_is_refused() {
        assert_eq!(parse_cpulist("0-3"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpulist("0-1,8,10-11\n"), Some(vec![0, 1, 8, 10, 11]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("0-99999999"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist(""), None);
    }

    #[test]
    fn numa_node_minus_one_is_unknown() {
        assert_eq!(parse_numa_node("-1"), None);
        assert_eq!(parse_numa_node("1\n"), Some(1));
    }
}
