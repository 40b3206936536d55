//! Raw link readings of one PCI function for the GPU probes (each value as read, for evidence; parsing is
//! `sysfs::pci`'s): link speed and width
//! (`/sys/bus/pci/devices/<bdf>/{current,max}_link_{speed,width}`), NUMA node and local CPUs.

use crate::host::{Host, ReadResult};
use crate::sysfs::pci::parse_link_speed;

pub use super::pci::PCI_DEVICES;

/// `/sys/bus/pci/devices/<bdf>/<attr>`.
pub fn attr_path(bdf: &str, attr: &str) -> String {
    format!("{PCI_DEVICES}/{bdf}/{attr}")
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

    /// Files that exist but could not be read (a function without a PCIe link has none of them: not an error).
    pub fn read_errors(&self) -> Vec<&crate::host::ReadError> {
        [
            &self.current_speed,
            &self.max_speed,
            &self.current_width,
            &self.max_width,
        ]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .filter(|e| !e.is_not_found())
        .collect()
    }

    pub fn max_gen(&self) -> Option<u32> {
        gen_of(&self.max_speed)
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
        .and_then(|t| parse_link_speed(t))
        .and_then(|speed| speed.generation())
        .map(u32::from)
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
        // Repeated ranges (`0-8191,0-8191,…` in a 1 MiB file) would expand to billions of entries: a list
        // longer than the most CPUs a kernel can have is as absurd as a CPU number beyond it.
        if lo > hi || hi > MAX_CPU || cpus.len() + (hi - lo) > MAX_CPU {
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
    fn cpulist_ranges_expand_and_garbage_is_refused() {
        assert_eq!(parse_cpulist("0-3"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpulist("0-1,8,10-11\n"), Some(vec![0, 1, 8, 10, 11]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("0-99999999"), None);
        // Bounded in total, not just per range.
        assert_eq!(parse_cpulist(&"0-8191,".repeat(1000)), None);
        assert_eq!(parse_cpulist("0-8191").map(|c| c.len()), Some(8192));
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist(""), None);
    }
}
