//! `/proc/self/mountinfo`: which mount, filesystem type and block device (`major:minor`) hold a directory.

use crate::host::{Host, ReadError};

pub const SELF_MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line: `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub major: u32,
    pub minor: u32,
    /// Where it is mounted, octal escapes (`\040`) decoded.
    pub mount_point: String,
    pub fs_type: String,
    /// The mount source (`/dev/vda`, `server:/export`, `overlay`).
    pub source: String,
    /// Per-mount options (`rw,relatime`).
    pub options: String,
    /// Per-superblock options (`rw,proto=rdma,…` for NFS).
    pub super_options: String,
}

impl Mount {
    pub fn dev(&self) -> String {
        format!("{}:{}", self.major, self.minor)
    }

    /// `proto=rdma` among the superblock options (NFS over RDMA).
    pub fn has_super_option(&self, option: &str) -> bool {
        self.super_options.split(',').any(|o| o == option)
    }
}

/// Parses the table; malformed lines are skipped (a mount table is never the thing under test).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let fields: Vec<&str> = before.split(' ').collect();
    if fields.len() < 6 {
        return None;
    }
    let (major, minor) = fields[2].split_once(':')?;
    let mut tail = after.split(' ');
    let fs_type = tail.next()?.to_string();
    let source = unescape(tail.next().unwrap_or(""));
    let super_options = tail.next().unwrap_or("").to_string();
    Some(Mount {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        mount_point: unescape(fields[4]),
        fs_type,
        source,
        options: fields[5].to_string(),
        super_options,
    })
}

/// The kernel escapes space, TAB, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let octal = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(octal, 8) {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that holds `path` (absolute, symlinks already resolved): the longest mount point that is `path`
/// or a parent of it; of several mounts on the same point the last one (it covers the others).
pub fn mount_for<'a>(mounts: &'a [Mount], path: &str) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts {
        let mp = m.mount_point.trim_end_matches('/');
        let covers = mp.is_empty()
            || path == mp
            || (path.starts_with(mp) && path.as_bytes().get(mp.len()) == Some(&b'/'));
        if covers && best.is_none_or(|b| mp.len() >= b.mount_point.trim_end_matches('/').len()) {
            best = Some(m);
        }
    }
    best
}

pub fn read_mounts(host: &Host) -> Result<Vec<Mount>, ReadError> {
    host.read(SELF_MOUNTINFO).map(|t| parse_mountinfo(&t))
}

/// The mount table where it is the thing judged (which filesystems are mounted at all): a line that is not a
/// mountinfo line is the error, never a mount quietly absent.
pub fn read_mounts_strict(host: &Host) -> Result<Vec<Mount>, ReadError> {
    let text = host.read(SELF_MOUNTINFO)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            parse_line(l).ok_or_else(|| {
                ReadError::malformed(
                    SELF_MOUNTINFO,
                    format!("line {} is not a mountinfo line: {l:?}", i + 1),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
25 22 0:23 / /tmp rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,size=65536k
26 22 254:16 / /data\\040disk rw,relatime shared:5 - xfs /dev/vdb rw,attr2
27 22 0:44 / /mnt/nfs rw,relatime shared:6 - nfs4 10.0.0.9:/export rw,vers=4.2,proto=rdma,port=20049
";

    #[test]
    fn mountinfo_fields_parse() {
        let m = parse_mountinfo(H200);
        assert_eq!(m.len(), 5);
        assert_eq!((m[0].major, m[0].minor), (254, 0));
        assert_eq!(m[0].fs_type, "ext4");
        assert_eq!(m[0].source, "/dev/vda");
        assert_eq!(m[3].mount_point, "/data disk");
        assert!(m[4].has_super_option("proto=rdma"));
    }

    #[test]
    fn longest_mount_point_wins() {
        let m = parse_mountinfo(H200);
        assert_eq!(mount_for(&m, "/root/x").unwrap().fs_type, "ext4");
        assert_eq!(mount_for(&m, "/tmp").unwrap().fs_type, "tmpfs");
        assert_eq!(mount_for(&m, "/tmp/fp-1").unwrap().fs_type, "tmpfs");
        assert_eq!(mount_for(&m, "/tmpx").unwrap().fs_type, "ext4");
        assert_eq!(mount_for(&m, "/data disk/a").unwrap().dev(), "254:16");
    }

    #[test]
    fn later_mount_on_same_point_covers_earlier() {
        let m = parse_mountinfo(
            "1 0 254:0 / / rw - ext4 /dev/vda rw\n2 1 0:50 / / rw - overlay overlay rw,lowerdir=/l\n",
        );
        assert_eq!(mount_for(&m, "/var/tmp").unwrap().fs_type, "overlay");
    }

    #[test]
    fn malformed_lines_are_skipped() {
        assert!(parse_mountinfo("garbage\n1 2 x:y / / rw - ext4 /dev/a rw\n").is_empty());
    }
}
