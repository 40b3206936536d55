//! Arbitrary bytes (up to 4096, as read from `<bdf>/config`) through the configuration-space walker: capability
//! chains that loop, point outside the bytes read or into the header, and truncated files give a
//! `ConfigError`, never a panic or an endless walk.
#![no_main]

use fabric_preflight::sysfs::pci_config::{ConfigSpace, CONFIG_SPACE_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = data[..data.len().min(CONFIG_SPACE_MAX as usize)].to_vec();
    let Ok(config) = ConfigSpace::new(bytes) else {
        return;
    };
    let _ = config.vendor();
    let _ = config.capabilities();
    let _ = config.extended_capabilities();
    if let Ok(Some(pcie)) = config.pcie() {
        let _ = pcie.port_type.as_str();
    }
    if let Ok(Some(acs)) = config.acs() {
        let _ = (acs.redirects(), acs.control_names());
    }
});
