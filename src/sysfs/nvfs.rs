//! `/proc/driver/nvidia-fs/stats`: the GDS kernel driver's own counters.

pub const NVFS_STATS: &str = "/proc/driver/nvidia-fs/stats";
pub const NVFS_VERSION: &str = "/proc/driver/nvidia-fs/version";
pub const NVFS_DEVCOUNT: &str = "/proc/driver/nvidia-fs/devcount";

/// `n=` of the first `Reads` row (`Reads : n=12 ok=12 err=0 readMiB=768 io_state_err=0`): reads nvidia-fs
/// served. `None` when the row or its `n=` is absent (IO stats disabled).
pub fn parse_reads_n(stats: &str) -> Option<u64> {
    let row = stats
        .lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == "Reads"))?;
    let (_, fields) = row.split_once(':')?;
    fields
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("n="))
        .and_then(|n| n.parse().ok())
}

/// The `Error` row of the stats file (`Error\t\t: cpu-gpu-pages=0 sg-ext=0 dma-map=0 dma-ref=0`).
pub fn error_row(stats: &str) -> Option<String> {
    stats
        .lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == "Error"))
        .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
}

pub fn row_has_nonzero(row: &str) -> bool {
    row.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .any(|(_, v)| v.parse::<u64>().is_ok_and(|n| n > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_row_n_parses() {
        let s = "GDS Version: 1.16.0.49 \nNVFS statistics(ver: 4.0)\n\nReads\t\t\t: n=12 ok=12 err=0 readMiB=768 io_state_err=0\nReads\t\t\t: Bandwidth(MiB/s)=1795 Avg-Latency(usec)=3495\n";
        assert_eq!(parse_reads_n(s), Some(12));
    }

    #[test]
    fn reads_row_without_n_is_none() {
        assert_eq!(parse_reads_n("Reads\t: err=0 io_state_err=0\n"), None);
        assert_eq!(parse_reads_n(""), None);
    }

    #[test]
    fn stats_error_row_parses() {
        let stats = "GDS Version: 1.16.0.49 \nNVFS statistics(ver: 4.0)\n\nReads\t\t\t: n=0 ok=0 err=0\nError\t\t\t: cpu-gpu-pages=0 sg-ext=0 dma-map=3 dma-ref=0\n";
        let row = error_row(stats).unwrap();
        assert!(row_has_nonzero(&row));
        assert!(!row_has_nonzero("cpu-gpu-pages=0 sg-ext=0"));
    }
}
