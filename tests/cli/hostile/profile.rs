//! Hostile inputs: profile. Every bad profile is refused (exit 2) within a second of CPU time and names the
//! file, the line and the key; a file that is not a profile is never quoted.

use std::path::Path;

use super::{bounded, mkfifo, HANG_LIMIT, QUICK_CPU};
use crate::util::*;

/// `run --profile <profile>` on a recorded tree: refused before any check runs, quickly, with exit 2; its stderr.
fn refused(profile: &Path) -> String {
    let run = bounded(
        preflight()
            .args(["run", "--root"])
            .arg(host("hgx-healthy"))
            .arg("--profile")
            .arg(profile),
        HANG_LIMIT,
    );
    let err = stderr(&run.out);
    assert_eq!(code(&run.out), Exit::USAGE, "{profile:?}: {err}");
    assert!(run.out.stdout.is_empty(), "{profile:?}: nothing may run");
    assert!(run.cpu < QUICK_CPU, "{profile:?}: {:?} of CPU", run.cpu);
    err
}

fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn fifo_device_or_directory_as_profile_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("site.yaml");
    mkfifo(&fifo);
    for (path, kind) in [
        (fifo.as_path(), "a FIFO"),
        (Path::new("/dev/zero"), "a character device"),
        (dir.path(), "a directory"),
    ] {
        let err = refused(path);
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(kind), "{err}");
    }
}

#[test]
fn fifo_device_directory_or_missing_file_as_extends_names_the_referencing_line() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("fifo.yaml"));
    std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();
    for target in ["fifo.yaml", "/dev/zero", "sub.yaml", "missing.yaml"] {
        let site = write(
            dir.path(),
            "site.yaml",
            format!("name: site\ndescription: d\nextends: {target}\n"),
        );
        let err = refused(&site);
        assert!(
            err.contains(&format!("{}:3", site.display())),
            "{target}: {err}"
        );
        assert!(err.contains("extends") && err.contains(target), "{err}");
    }
}

#[test]
fn deep_nesting_is_refused_before_the_parser_in_well_under_a_second() {
    let depth = 100_000;
    let flow_seq = format!(
        "name: n\nexpect: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let flow_map = format!(
        "name: n\nexpect: {}{}\n",
        "{a: ".repeat(depth),
        "}".repeat(depth)
    );
    let block_seq = format!("name: n\nexpect:\n  {}x\n", "- ".repeat(depth));
    let block_map: String = std::iter::once("name: n\n".to_string())
        .chain((0..200).map(|i| format!("{}k{i}:\n", " ".repeat(i))))
        .collect();
    let mixed = format!(
        "name: n\nexpect:\n  - - {}{}\n",
        "[{a: ".repeat(depth / 2),
        "}]".repeat(depth / 2)
    );
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("flow_seq", &flow_seq),
        ("flow_map", &flow_map),
        ("block_seq", &block_seq),
        ("block_map", &block_map),
        ("mixed", &mixed),
    ] {
        let path = write(dir.path(), &format!("{name}.yaml"), text);
        let err = refused(&path);
        assert!(
            err.contains("nesting deeper than 64 levels"),
            "{name}: {err}"
        );
        assert!(
            err.contains(&format!("{}:", path.display())),
            "{name}: {err}"
        );
        let parent = write(dir.path(), "parent.yaml", text);
        let site = write(dir.path(), "site.yaml", "name: s\nextends: parent.yaml\n");
        let err = refused(&site);
        assert!(
            err.contains("nesting deeper than 64 levels"),
            "{name}: {err}"
        );
        assert!(err.contains(&parent.display().to_string()), "{name}: {err}");
    }
}

#[test]
fn limits_that_would_flip_a_verdict_are_refused_at_their_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    for (bad, key) in [
        ("thresholds:\n  rdma_error_count: {warn: .nan, fail: .nan}", "rdma_error_count"),
        ("thresholds:\n  rdma_error_count: {warn: 200, fail: 100}", "rdma_error_count"),
        ("thresholds:\n  h2d_gbytes_per_sec: {warn: 40, fail: 48}", "h2d_gbytes_per_sec"),
        ("thresholds:\n  pair_latency_us: {fail: -1}", "pair_latency_us"),
        ("thresholds:\n  gdr_bandwidth_pct_of_link: {fail: .inf}", "gdr_bandwidth_pct_of_link"),
        ("thresholds:\n  rdma_bandwidth_pct_of_link: {fail: 150}", "rdma_bandwidth_pct_of_link"),
        (
            "thresholds:\n  nccl_busbw_gbytes_per_sec: {all_reduce: {multi_node: {warn: 1, fail: 2}}}",
            "multi_node",
        ),
        ("expect:\n  rdma_min_rate_gbps: .nan", "rdma_min_rate_gbps"),
        ("expect:\n  rdma_min_rate_gbps: -400", "rdma_min_rate_gbps"),
        ("expect:\n  efa_link_gbps: .inf", "efa_link_gbps"),
        ("expect:\n  driver_min_version: \"abc\"", "driver_min_version"),
    ] {
        let site = write(dir.path(), "site.yaml", format!("name: site\n{bad}\n"));
        let err = refused(&site);
        assert!(err.contains(&format!("{}:3", site.display())), "{bad}: {err}");
        assert!(err.contains(key), "{bad}: {err}");
    }
}

#[test]
fn a_file_that_is_not_a_profile_is_never_quoted() {
    let secret = "s3cr3tHashValue";
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        (
            "shadow",
            format!("root:$6${secret}$x:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
                .into_bytes(),
        ),
        (
            "shadow-spaced",
            format!("root: {secret}\nbin: x\n").into_bytes(),
        ),
        (
            "config.json",
            format!("{{\"token\": \"{secret}\", \"n\": [1, 2]}}\n").into_bytes(),
        ),
        (
            "binary",
            [
                b"\x7fELF\x02\x01".as_slice(),
                secret.as_bytes(),
                &[0, 1, 2, 0xfe],
            ]
            .concat(),
        ),
        (
            "app.log",
            format!("2026-12-05 10:00:00 INFO login user={secret}\nERROR: {secret}\n").into_bytes(),
        ),
        ("list.yaml", format!("- {secret}\n- two\n").into_bytes()),
    ] {
        let path = write(dir.path(), name, text);
        let err = refused(&path);
        assert!(!err.contains(secret), "{name} quoted: {err}");
        assert!(err.contains(&path.display().to_string()), "{name}: {err}");
        assert!(
            ["not a profile", "not valid YAML", "not UTF-8 text"]
                .iter()
                .any(|why| err.contains(why)),
            "{name}: {err}"
        );
    }
}

#[test]
fn extends_cycles_and_long_chains_end_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let own = write(&a, "p.yaml", "name: p\nextends: ../a/p.yaml\n");
    let err = refused(&own);
    assert!(err.contains("loops back"), "{err}");
    write(&a, "q.yaml", "name: q\nextends: ./../a/r.yaml\n");
    let r = write(&a, "r.yaml", "name: r\nextends: q.yaml\n");
    let err = refused(&r);
    assert!(err.contains("loops back"), "{err}");
    for i in 0..40 {
        write(
            dir.path(),
            &format!("c{i}.yaml"),
            format!("name: c{i}\nextends: c{}.yaml\n", i + 1),
        );
    }
    write(dir.path(), "c40.yaml", "name: c40\n");
    let err = refused(&dir.path().join("c0.yaml"));
    assert!(err.contains("longer than 16"), "{err}");
}
