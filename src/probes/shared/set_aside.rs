//! The RDMA devices a transfer check leaves alone, shared by `rdma.loopback` and `gdr.loopback`.

use super::efa::no_rc;
use crate::host::{Host, ReadError};
use crate::model::CheckResult;
use crate::rules::nic_role;
use crate::sysfs::efa;

/// The devices a transfer check leaves alone, and the results that say so: EFA (the efa driver refuses RC
/// queue pairs) and management devices (NVLink switch management, a VM's front-end VF: no job's data).
pub struct SetAside {
    devices: Vec<String>,
    pub results: Vec<CheckResult>,
}

impl SetAside {
    pub fn read(id: &str, host: &Host, listed: &[String]) -> Result<SetAside, ReadError> {
        let (_, efa) = efa::split_efa(host, listed)?;
        let management = nic_role::management_devices(host)?;
        let mut results = Vec::new();
        if !efa.is_empty() {
            results.push(no_rc(id, &efa));
        }
        if !management.is_empty() {
            results.push(nic_role::management_left_alone(id, &management));
        }
        let mut devices = efa;
        devices.extend(management.into_iter().map(|(d, _)| d));
        Ok(SetAside { devices, results })
    }

    pub fn contains(&self, device: &str) -> bool {
        self.devices.iter().any(|d| d == device)
    }

    /// Every listed device is set aside (and some are): nothing is left to loop back.
    pub fn covers(&self, listed: &[String]) -> bool {
        !self.devices.is_empty() && listed.iter().all(|d| self.contains(d))
    }
}
