//! PCIe Advanced Error Reporting counters of a PCI function (kernel `drivers/pci/pcie/aer.c`, ABI
//! `sysfs-bus-pci-devices-aer_stats`): `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal` hold one
//! `Name count` pair per line and end with `TOTAL_ERR_COR` / `TOTAL_ERR_NONFATAL` / `TOTAL_ERR_FATAL`; a root
//! port adds `aer_rootport_total_err_{cor,fatal,nonfatal}`, one number each, for the errors it received from
//! below. The files exist only where the kernel has CONFIG_PCIEAER and the function has the AER capability.

use crate::host::{optional, Host, ReadError, ReadErrorKind};

/// One of a function's three per-device files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Correctable,
    NonFatal,
    Fatal,
}

impl Severity {
    pub const ALL: [Severity; 3] = [Severity::Fatal, Severity::NonFatal, Severity::Correctable];

    pub fn file(self) -> &'static str {
        match self {
            Severity::Correctable => "aer_dev_correctable",
            Severity::NonFatal => "aer_dev_nonfatal",
            Severity::Fatal => "aer_dev_fatal",
        }
    }

    fn total_key(self) -> &'static str {
        match self {
            Severity::Correctable => "TOTAL_ERR_COR",
            Severity::NonFatal => "TOTAL_ERR_NONFATAL",
            Severity::Fatal => "TOTAL_ERR_FATAL",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Correctable => "correctable",
            Severity::NonFatal => "non-fatal",
            Severity::Fatal => "fatal",
        }
    }
}

/// The counters of one file: each error type's count, and the kernel's total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub by_name: Vec<(String, u64)>,
    pub total: u64,
}

impl Counts {
    /// `MalfTLP 1, CmpltTO 3`: the types that counted.
    pub fn nonzero(&self) -> String {
        self.by_name
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A root port's totals of what it received from the functions below it.
pub const ROOT_PORT_TOTALS: [(&str, Severity); 3] = [
    ("aer_rootport_total_err_fatal", Severity::Fatal),
    ("aer_rootport_total_err_nonfatal", Severity::NonFatal),
    ("aer_rootport_total_err_cor", Severity::Correctable),
];

fn garbage(path: &str, why: String) -> ReadError {
    ReadError {
        path: path.to_string(),
        kind: ReadErrorKind::Other(why),
    }
}

/// Parses one `aer_dev_*` file; anything but `Name count` lines ending with the total is an error naming the line.
pub fn parse(path: &str, severity: Severity, text: &str) -> Result<Counts, ReadError> {
    let mut by_name = Vec::new();
    let mut total = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let (Some(name), Some(count), None) = (words.next(), words.next(), words.next()) else {
            return Err(garbage(path, format!("not `Name count`: {line:?}")));
        };
        let count: u64 = count
            .parse()
            .map_err(|_| garbage(path, format!("not a count: {line:?}")))?;
        if name == severity.total_key() {
            total = Some(count);
        } else {
            by_name.push((name.to_string(), count));
        }
    }
    let total = total.ok_or_else(|| {
        garbage(
            path,
            format!("no {} line: unrecognised", severity.total_key()),
        )
    })?;
    Ok(Counts { by_name, total })
}

/// One file of the function in sysfs directory `dir`: None when the kernel does not provide it.
pub fn read(host: &Host, dir: &str, severity: Severity) -> Result<Option<Counts>, ReadError> {
    let path = format!("{dir}/{}", severity.file());
    match optional(host.read(&path))? {
        None => Ok(None),
        Some(text) => parse(&path, severity, &text).map(Some),
    }
}

/// A root port's total `name` (one of [`ROOT_PORT_TOTALS`]): None when absent.
pub fn read_root_port_total(host: &Host, dir: &str, name: &str) -> Result<Option<u64>, ReadError> {
    let path = format!("{dir}/{name}");
    match optional(host.read(&path))? {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| garbage(&path, format!("not a count: {:?}", text.trim()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FATAL: &str = "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\n\
MalfTLP 2\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\n\
PoisonTLPBlocked 0\nTOTAL_ERR_FATAL 2\n";

    #[test]
    fn kernel_format_parses_with_its_total() {
        let c = parse("f", Severity::Fatal, FATAL).unwrap();
        assert_eq!(c.total, 2);
        assert_eq!(c.by_name.len(), 18);
        assert_eq!(c.nonzero(), "MalfTLP 2");
    }

    #[test]
    fn garbage_is_an_error_naming_the_line() {
        for bad in [
            "TOTAL_ERR_FATAL lots\n",
            "RxErr\n",
            "",
            "RxErr 1 2\nTOTAL_ERR_COR 1\n",
        ] {
            let e = parse("/x/aer_dev_fatal", Severity::Fatal, bad).unwrap_err();
            assert_eq!(e.path, "/x/aer_dev_fatal", "{bad:?}");
        }
        // The total of another file is not this file's total.
        assert!(parse("f", Severity::Correctable, "TOTAL_ERR_FATAL 0\n").is_err());
    }
}
