//! Files that several checks of one run read and that do not change while it runs (version strings, the kernel
//! release, an RDMA device's attributes and port list): read once per host and shared, like the PCIe tree.
//! Not for values that move (counters, link states a check waits on).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::host::{Host, ReadResult};

/// One cell per path, so a read that blocks (a driver's attribute) holds up only the checks asking for that path.
type Cells<T> = Mutex<HashMap<String, Arc<OnceLock<ReadResult<T>>>>>;

#[derive(Default)]
struct Texts(Cells<String>);

#[derive(Default)]
struct Listings(Cells<Vec<String>>);

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

/// The answer kept for `path`, or `read`'s, kept. Read outside the map's lock; two checks asking for the same
/// path at once read it once.
fn once<T: Clone>(
    cells: &Cells<T>,
    path: &str,
    read: impl FnOnce() -> ReadResult<T>,
) -> ReadResult<T> {
    let cell = cells
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(path.to_string())
        .or_default()
        .clone();
    cell.get_or_init(read).clone()
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

    /// A read that never returns (a wedged driver's attribute) must not hold up the checks reading other files.
    #[test]
    fn a_read_that_blocks_holds_up_only_its_own_path() {
        let cells = &Cells::<String>::default();
        let (started, reading) = std::sync::mpsc::channel();
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(move || {
                once(cells, "/sys/class/infiniband/mlx5_0/fw_ver", || {
                    started.send(()).unwrap();
                    blocked.recv().unwrap();
                    Ok("28.39".into())
                })
            });
            reading.recv().unwrap();
            s.spawn(move || {
                let version = once(cells, "/sys/module/nvidia/version", || Ok("580.1".into()));
                done.send(version).unwrap()
            });
            let other = finished.recv_timeout(std::time::Duration::from_secs(60));
            release.send(()).unwrap();
            assert_eq!(
                other.expect("held up by another path's read").unwrap(),
                "580.1"
            );
        });
    }
}
