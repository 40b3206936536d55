//! Files that several checks of one run read and that do not change while it runs (version strings, the kernel
//! release, an RDMA device's attributes and port list): read once per host and shared, like the PCIe tree.
//! Not for values that move (counters, link states a check waits on).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::host::{Host, ReadResult};

#[derive(Default)]
struct Texts(Mutex<HashMap<String, ReadResult<String>>>);

#[derive(Default)]
struct Listings(Mutex<HashMap<String, ReadResult<Vec<String>>>>);

/// [`Host::read`], once per host and path.
pub fn read(host: &Host, path: &str) -> ReadResult<String> {
    once(&host.shared(|_| Texts::default()).0, path, || {
        host.read(path)
    })
}

/// [`Host::read_dir`], once per host and path.
pub fn read_dir(host: &Host, path: &str) -> ReadResult<Vec<String>> {
    once(&host.shared(|_| Listings::default()).0, path, || {
        host.read_dir(path)
    })
}

/// The answer kept for `path`, or `read`'s, kept. The lock is held while reading: two checks asking at once
/// read the file once (these files are small).
fn once<T: Clone>(
    cache: &Mutex<HashMap<String, ReadResult<T>>>,
    path: &str,
    read: impl FnOnce() -> ReadResult<T>,
) -> ReadResult<T> {
    let mut cache = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cache.entry(path.to_string()).or_insert_with(read).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_read_on_the_same_host_answers_from_the_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/module/nvidia")).unwrap();
        let version = dir.path().join("sys/module/nvidia/version");
        std::fs::write(&version, "580.1\n").unwrap();
        let host = Host::at(dir.path()).unwrap();
        assert_eq!(read(&host, "/sys/module/nvidia/version").unwrap(), "580.1");
        assert_eq!(read_dir(&host, "/sys/module").unwrap(), ["nvidia"]);
        std::fs::remove_dir_all(dir.path().join("sys/module")).unwrap();
        assert_eq!(
            read(&host.clone(), "/sys/module/nvidia/version").unwrap(),
            "580.1"
        );
        assert_eq!(read_dir(&host, "/sys/module").unwrap(), ["nvidia"]);
        assert!(read(&Host::at(dir.path()).unwrap(), "/sys/module/nvidia/version").is_err());
    }
}
