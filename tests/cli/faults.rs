//! Fault injection through the real loading path: tiny C libraries built at test time, named like the vendor
//! ones (`libnvidia-ml.so.1`, `libcuda.so.1`, `libcufile.so.0`, `libibverbs.so.1`) and found through
//! `LD_LIBRARY_PATH`, exactly as the binary finds the real ones. A library that hangs or crashes must cost one
//! check its result (`error`, naming the call), never the run: the run ends within the check's deadline, the
//! other checks are reported, and the exit code is 3 when nothing failed.
//!
//! These tests need a C compiler (`cc`); without one they fail: CI has gcc, and a silent pass would hide that
//! the isolation was never exercised.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::util::*;

/// The deadline of a check whose library hangs: the subject of these tests. A run with one costs this deadline,
/// never two: the upper bound is `2 × HUNG_S`, which leaves `HUNG_S` for starting the binary, the other checks
/// and the report on a loaded machine (about 1 s was measured there with both cores busy).
pub(super) const HUNG_S: u64 = 4;
/// A check's deadline where it is not what the test is about: no loaded machine reaches it.
pub(super) const UNHURRIED_S: u64 = 60;

/// Static checks that pass on `hgx-healthy` with the generic profile: "the other checks are still reported".
const BYSTANDERS: &[&str] = &["driver.nvidia", "rdma.link", "pcie.link"];

const NVML_HANGS_IN_INIT: &str = r#"
#include <unistd.h>
int nvmlInit_v2(void) { for (;;) pause(); return 0; }
int nvmlShutdown(void) { return 0; }
"#;

const NVML_CRASHES_IN_COUNT: &str = r#"
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) {
    volatile int *nowhere = 0;
    *nowhere = 1; /* SIGSEGV, as a driver that lost its GPU does */
    *count = 0;
    return 0;
}
"#;

const NVML_HANGS_IN_SHUTDOWN: &str = r#"
#include <unistd.h>
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 0; return 0; }
int nvmlShutdown(void) { for (;;) pause(); return 0; }
"#;

/// Just enough of the CUDA driver API for gds.read to reach cuFileDriverOpen: every call cudarc and
/// `dynlib::cuda` resolve exists and succeeds.
const CUDA_STUB: &str = r#"
#include <string.h>
#define OK(name) int name() { return 0; }
OK(cuInit) OK(cuDeviceGetCount) OK(cuDeviceGet) OK(cuDeviceGetAttribute)
OK(cuDeviceTotalMem_v2) OK(cuDeviceCanAccessPeer) OK(cuDevicePrimaryCtxRelease_v2) OK(cuCtxSetCurrent)
OK(cuCtxSynchronize) OK(cuCtxEnablePeerAccess) OK(cuMemFree_v2) OK(cuMemHostAlloc) OK(cuMemFreeHost)
OK(cuMemHostRegister_v2) OK(cuMemHostUnregister) OK(cuMemcpyHtoD_v2) OK(cuMemcpyDtoH_v2)
OK(cuMemcpyHtoDAsync_v2) OK(cuMemcpyDtoHAsync_v2) OK(cuMemcpyPeerAsync) OK(cuMemsetD32_v2) OK(cuStreamCreate)
OK(cuStreamSynchronize) OK(cuStreamDestroy_v2) OK(cuEventCreate) OK(cuEventRecord) OK(cuEventSynchronize)
OK(cuEventElapsedTime_v2) OK(cuEventDestroy_v2)
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "Stub GPU", len); return 0; }
int cuDeviceGetPCIBusId(char *id, int len, int dev) { strncpy(id, "0000:18:00.0", len); return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { static int c; *ctx = &c; return 0; }
int cuMemAlloc_v2(unsigned long long *ptr, unsigned long bytes) { *ptr = 0x10000; return 0; }
int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_STUB"; return 0; }
int cuGetErrorString(int e, const char **s) { *s = "stub"; return 0; }
"#;

/// cuFile whose driver open never returns, after leaving a file in the probe's scratch directory (where the
/// binary points CUFILE_LOGFILE_PATH) as a real library writes its log: the runner must remove it. Compiled with
/// HANG_IN_HANDLE_REGISTER defined, the driver opens and the hang comes later, when gds.read has written its
/// test file.
const CUFILE_HANGS_IN_DRIVER_OPEN: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
typedef struct { int err; int cu_err; } CUfileError_t;
static CUfileError_t ok(void) { CUfileError_t r = {0, 0}; return r; }
static CUfileError_t unsupported(void) { CUfileError_t r = {5009, 0}; return r; }
CUfileError_t cuFileGetVersion(int *v) { *v = 1150; return ok(); }
CUfileError_t cuFileDriverOpen(void) {
    const char *log = getenv("CUFILE_LOGFILE_PATH");
    if (log) { FILE *f = fopen(log, "w"); if (f) { fputs("opening the driver\n", f); fclose(f); } }
#ifndef HANG_IN_HANDLE_REGISTER
    for (;;) pause();
#endif
    return ok();
}
CUfileError_t cuFileDriverClose(void) { return ok(); }
CUfileError_t cuFileDriverGetProperties(void *p) { return unsupported(); }
CUfileError_t cuFileBufRegister(const void *p, size_t n, int flags) { return unsupported(); }
CUfileError_t cuFileBufDeregister(const void *p) { return unsupported(); }
CUfileError_t cuFileHandleRegister(void **h, void *descr) {
#ifdef HANG_IN_HANDLE_REGISTER
    for (;;) pause();
#endif
    return unsupported();
}
void cuFileHandleDeregister(void *h) {}
long cuFileRead(void *h, void *p, size_t n, long off, long dev_off) { return -1; }
"#;

/// rdma-core whose device discovery fails the way a container without /dev/infiniband access does.
const VERBS_DENIED: &str = r#"
#include <errno.h>
#include <stddef.h>
void **ibv_get_device_list(int *n) { if (n) *n = 0; errno = EACCES; return NULL; }
void ibv_free_device_list(void **l) {}
"#;

const VERBS_HANGS_IN_DISCOVERY: &str = r#"
#include <stddef.h>
#include <unistd.h>
void **ibv_get_device_list(int *n) { for (;;) pause(); return NULL; }
void ibv_free_device_list(void **l) {}
"#;

/// Compiles each `(file name, C source)` into a shared library in a fresh directory. Panics, loudly, when
/// there is no C compiler: the test must not pass without having injected anything.
pub(super) fn shims(libs: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, source) in libs {
        let src = dir.path().join(format!("{name}.c"));
        std::fs::write(&src, source).expect("write C source");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O0", "-w", "-o"])
            .arg(dir.path().join(name))
            .arg(&src)
            .output()
            .unwrap_or_else(|e| {
                panic!("fault-injection tests need a C compiler: `cc` could not run ({e})")
            });
        assert!(
            out.status.success(),
            "cc failed for {name}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// A profile file extending `generic` with the given per-check timeouts.
pub(super) fn profile(dir: &Path, timeouts: &[(&str, u64)]) -> PathBuf {
    let mut yaml = String::from("name: faults\nextends: generic\nchecks:\n");
    for (id, secs) in timeouts {
        yaml.push_str(&format!("  {id}:\n    timeout: {secs}\n"));
    }
    let path = dir.join("faults.yaml");
    std::fs::write(&path, yaml).expect("write profile");
    path
}

struct Run {
    code: u8,
    report: Value,
    elapsed: Duration,
}

/// `run --only <checks>` on `hgx-healthy` (no recorded library answers: every library is called live) with the
/// shims first on the library search path.
fn run_with(libs: &Path, profile: &Path, checks: &[&str], extra: &[&str]) -> Run {
    let started = Instant::now();
    let out = preflight()
        .env("LD_LIBRARY_PATH", libs)
        .args(["run", "--format", "json", "--color", "never", "--root"])
        .arg(host("hgx-healthy"))
        .arg("--profile")
        .arg(profile)
        .args(["--only", &checks.join(",")])
        .args(extra)
        .output()
        .expect("binary runs");
    let elapsed = started.elapsed();
    eprintln!("run --only {} took {elapsed:?}", checks.join(","));
    let report: Value = json_out(Schema::Run, &out);
    Run {
        code: code(&out),
        report,
        elapsed,
    }
}

/// The faulty check is one `error` naming itself and the call; every bystander is reported and passes; the
/// run took the deadline, and not a second one; exit 3.
fn assert_contained(run: &Run, id: &str, deadline_s: u64, expected: &str) {
    let r = result_of(&run.report, id);
    assert_eq!(r["status"], "error", "{r:#}");
    let summary = r["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{id}: ")) && summary.contains(expected),
        "{id}: expected `{expected}` in {summary:?}"
    );
    for bystander in BYSTANDERS {
        let statuses: Vec<String> = verdicts(&run.report)
            .into_iter()
            .filter(|(i, _, _)| i == bystander)
            .map(|(_, _, s)| s)
            .collect();
        assert!(
            !statuses.is_empty() && statuses.iter().all(|s| s == "pass"),
            "{bystander}: {statuses:?}"
        );
    }
    let deadline = Duration::from_secs(deadline_s);
    assert!(
        run.elapsed >= deadline && run.elapsed < 2 * deadline,
        "{id}: the run took {:?} for a {deadline_s} s deadline",
        run.elapsed
    );
    assert_eq!(
        run.code,
        Exit::COULD_NOT_RUN,
        "nothing failed, one check could not run"
    );
}

fn checks_with(id: &'static str) -> Vec<&'static str> {
    let mut c = vec![id];
    c.extend_from_slice(BYSTANDERS);
    c
}

#[test]
fn nvml_init_that_never_returns_is_killed_at_the_deadline() {
    let libs = shims(&[("libnvidia-ml.so.1", NVML_HANGS_IN_INIT)]);
    let p = profile(libs.path(), &[("gpu.inventory", HUNG_S)]);
    let run = run_with(libs.path(), &p, &checks_with("gpu.inventory"), &[]);
    assert_contained(
        &run,
        "gpu.inventory",
        HUNG_S,
        &format!("timed out after {HUNG_S} s in nvmlInit_v2"),
    );
}

#[test]
fn nvml_segfault_in_device_count_is_a_crash_naming_the_call() {
    let libs = shims(&[("libnvidia-ml.so.1", NVML_CRASHES_IN_COUNT)]);
    let p = profile(libs.path(), &[("gpu.inventory", UNHURRIED_S)]);
    let run = run_with(libs.path(), &p, &checks_with("gpu.inventory"), &[]);
    let r = result_of(&run.report, "gpu.inventory");
    assert_eq!(r["status"], "error", "{r:#}");
    assert_eq!(
        r["summary"],
        "gpu.inventory: crashed with signal 11 (SIGSEGV) in nvmlDeviceGetCount_v2"
    );
    assert!(
        run.elapsed < Duration::from_secs(UNHURRIED_S / 2),
        "a crash ends the probe at once, not at its deadline: {:?}",
        run.elapsed
    );
    assert_eq!(run.code, Exit::COULD_NOT_RUN);
    for bystander in BYSTANDERS {
        assert!(verdicts(&run.report)
            .iter()
            .any(|(i, _, s)| i == bystander && s == "pass"));
    }
}

#[test]
fn every_nvml_check_survives_the_same_hang() {
    let libs = shims(&[("libnvidia-ml.so.1", NVML_HANGS_IN_INIT)]);
    let ids = ["gpu.inventory", "gpu.bar1", "gpu.p2p"];
    let p = profile(libs.path(), &ids.map(|id| (id, HUNG_S)));
    let mut checks = ids.to_vec();
    checks.extend_from_slice(BYSTANDERS);
    // Library checks run concurrently: three hung libraries cost one deadline, not three.
    let run = run_with(libs.path(), &p, &checks, &[]);
    for id in ids {
        assert_contained(
            &run,
            id,
            HUNG_S,
            &format!("timed out after {HUNG_S} s in nvmlInit_v2"),
        );
    }
}

#[test]
fn cufile_driver_open_that_never_returns_is_killed_and_its_files_removed() {
    let libs = shims(&[
        ("libcuda.so.1", CUDA_STUB),
        ("libcufile.so.0", CUFILE_HANGS_IN_DRIVER_OPEN),
    ]);
    let gds_dir = tempfile::tempdir().expect("temp dir");
    let p = profile(libs.path(), &[("gds.read", HUNG_S)]);
    let run = run_with(
        libs.path(),
        &p,
        &checks_with("gds.read"),
        &["--gds-dir", gds_dir.path().to_str().unwrap()],
    );
    assert_contained(
        &run,
        "gds.read",
        HUNG_S,
        &format!("timed out after {HUNG_S} s in cuFileDriverOpen"),
    );
    let left: Vec<_> = std::fs::read_dir(gds_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "the killed probe left {left:?}");
}

#[test]
fn verbs_discovery_error_is_reported_with_its_errno() {
    let libs = shims(&[("libibverbs.so.1", VERBS_DENIED)]);
    let p = profile(libs.path(), &[("gdr.loopback", UNHURRIED_S)]);
    let run = run_with(libs.path(), &p, &checks_with("gdr.loopback"), &[]);
    let r = result_of(&run.report, "gdr.loopback");
    // The node has NICs bound to their driver and a library that refuses: a failure, with the library's
    // answer as evidence (it was a skip, exit 0, before the presence rule).
    assert_eq!(r["status"], "fail", "{r:#}");
    assert!(
        r["evidence"].to_string().contains(&format!(
            "ibv_get_device_list = NULL, errno {}",
            libc::EACCES
        )),
        "{r:#}"
    );
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("libibverbs.so.1 failed: ibv_get_device_list: Permission denied"),
        "{r:#}"
    );
    assert!(r["remediation"].as_str().unwrap().contains("EACCES"));
    assert_eq!(run.code, Exit::CHECK_FAILED);
}

#[test]
fn verbs_discovery_that_never_returns_is_killed_at_the_deadline() {
    let libs = shims(&[("libibverbs.so.1", VERBS_HANGS_IN_DISCOVERY)]);
    let p = profile(libs.path(), &[("gdr.loopback", HUNG_S)]);
    let run = run_with(libs.path(), &p, &checks_with("gdr.loopback"), &[]);
    assert_contained(
        &run,
        "gdr.loopback",
        HUNG_S,
        &format!("timed out after {HUNG_S} s in ibv_get_device_list"),
    );
}

#[test]
fn run_deadline_caps_a_hung_library_whose_check_has_a_longer_one() {
    let libs = shims(&[("libnvidia-ml.so.1", NVML_HANGS_IN_INIT)]);
    // gpu.inventory's own deadline is longer than the whole run's.
    let p = profile(libs.path(), &[("gpu.inventory", UNHURRIED_S)]);
    let run = run_with(
        libs.path(),
        &p,
        &checks_with("gpu.inventory"),
        &["--timeout", &HUNG_S.to_string()],
    );
    assert_contained(
        &run,
        "gpu.inventory",
        HUNG_S,
        &format!("the run deadline (--timeout {HUNG_S} s) was reached in nvmlInit_v2"),
    );
}

/// One binary starts everywhere: it names no vendor library in its dynamic section (each is opened at run time,
/// when a check needs it), so a node without the driver, CUDA, cuFile or rdma-core still runs every other check.
#[test]
fn binary_links_only_the_c_runtime() {
    let out = Command::new("readelf")
        .args(["-d", bin()])
        .output()
        .unwrap_or_else(|e| panic!("needs readelf (binutils, installed with gcc): {e}"));
    assert!(out.status.success(), "{}", stderr(&out));
    let needed: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next().map(str::to_string))
        .collect();
    assert!(
        !needed.is_empty(),
        "no NEEDED entries parsed:\n{}",
        stdout(&out)
    );
    for lib in &needed {
        assert!(
            [
                "libc.so",
                "libm.so",
                "libgcc_s.so",
                "ld-linux",
                "libpthread.so",
                "libdl.so",
                "librt.so"
            ]
            .iter()
            .any(|ok| lib.starts_with(ok)),
            "the binary needs {lib} to start: {needed:?}"
        );
    }
}

#[test]
fn nvml_shutdown_that_never_returns_is_named_too() {
    let libs = shims(&[("libnvidia-ml.so.1", NVML_HANGS_IN_SHUTDOWN)]);
    let p = profile(libs.path(), &[("gpu.inventory", HUNG_S)]);
    let run = run_with(libs.path(), &p, &checks_with("gpu.inventory"), &[]);
    assert_contained(
        &run,
        "gpu.inventory",
        HUNG_S,
        &format!("timed out after {HUNG_S} s in nvmlShutdown"),
    );
}

/// Process ids whose parent is `parent` (from /proc/*/stat: `pid (comm) state ppid …`).
fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after_comm = stat.rsplit_once(") ")?.1.to_string();
                    after_comm.split(' ').nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// The process exists and is not a zombie (a dead child whose new parent has not reaped it yet).
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        }
        found.push(path);
    }
    found
}

/// Why gds.read wrote no test file, from the run's own report (stopped with SIGTERM if still running, which
/// still writes it). gds.read rightly refuses to fill a disk: on a build filesystem with less than 5% (at
/// least 1 GiB) free beyond the 8 MiB file, this test cannot run, and says so.
fn why_no_test_file(mut run: std::process::Child, gds_dir: &Path) -> String {
    if run.try_wait().unwrap().is_none() {
        // SAFETY: a signal to the process this test started.
        unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    }
    let out = run.wait_with_output().unwrap();
    let said = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|report| {
            report["checks"]
                .as_array()?
                .iter()
                .find(|r| r["id"] == "gds.read")
                .map(|r| r["summary"].as_str().unwrap_or_default().to_string())
        });
    match said {
        Some(summary) if summary.contains("not writing the") => format!(
            "gds.read refused to write its test file: the filesystem holding {} (CARGO_TARGET_TMPDIR) is too \
             full for it (it keeps 5% of the filesystem, at least 1 GiB, free). Free space there and rerun. \
             gds.read said: {summary}",
            gds_dir.display()
        ),
        Some(summary) => format!("gds.read never wrote its test file; it said: {summary}"),
        None => format!(
            "gds.read never wrote its test file, and the run gave no report ({}); stderr: {}",
            out.status,
            stderr(&out)
        ),
    }
}

/// Pod deletion (SIGTERM) and Ctrl-C (SIGINT) while an active check is inside a library call: the child is
/// killed, its scratch directory (gds.read's test file and cuFile's log) removed, the partial report still written
/// with the interrupted check as an error and the finished ones as they were, and the exit is 3.
#[test]
fn stopping_signal_mid_probe_kills_the_child_removes_scratch_and_reports_exit_3() {
    let cufile = format!("#define HANG_IN_HANDLE_REGISTER\n{CUFILE_HANGS_IN_DRIVER_OPEN}");
    let libs = shims(&[("libcuda.so.1", CUDA_STUB), ("libcufile.so.0", &cufile)]);
    // An 8 MiB test file in 1 MiB blocks, and a deadline the signal comes well before.
    let p = libs.path().join("signal.yaml");
    std::fs::write(
        &p,
        "name: signal\nextends: generic\nexpect:\n  gds_file_size_mib: 8\n  gds_block_size_kib: 1024\n\
         checks:\n  gds.read:\n    timeout: 60\n",
    )
    .unwrap();
    // To the run alone (pod deletion), to its whole process group (Ctrl-C, slurmd: the child gets it too), and
    // SIGKILL (slurmd after KillWait), which allows no clean-up but must still take the probe child along.
    for (signal, name, to_group) in [
        (libc::SIGTERM, "SIGTERM", false),
        (libc::SIGINT, "SIGINT", true),
        (libc::SIGTERM, "SIGTERM", true),
        (libc::SIGKILL, "SIGKILL", false),
    ] {
        // On the build's filesystem: gds.read opens its file with O_DIRECT, which an old tmpfs refuses.
        let gds_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        let mut run = preflight()
            .env("LD_LIBRARY_PATH", libs.path())
            .args(["run", "--format", "json", "--color", "never", "--root"])
            .arg(host("hgx-healthy"))
            .arg("--profile")
            .arg(&p)
            // gdr.loopback is the active check queued after gds.read: it must not start.
            .args(["--only", &checks_with("gds.read").join(",")])
            .args(["--only", "gdr.loopback"])
            .arg("--gds-dir")
            .arg(gds_dir.path())
            .arg("--termination-log")
            .arg(libs.path().join("termination-log"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("binary starts");
        // gds.read writes its whole test file, then the stand-in cuFile hangs in cuFileHandleRegister.
        let waiting = Instant::now();
        while !files_under(gds_dir.path())
            .iter()
            .any(|f| f.ends_with("gds-read.bin") && f.metadata().is_ok_and(|m| m.len() == 8 << 20))
        {
            if run.try_wait().unwrap().is_some() || waiting.elapsed() > Duration::from_secs(60) {
                panic!("{}", why_no_test_file(run, gds_dir.path()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let children = children_of(run.id());
        assert!(!children.is_empty(), "the probe child is running");
        // The run leads its own process group, so the group is the run and its children.
        let target = if to_group {
            -(run.id() as i32)
        } else {
            run.id() as i32
        };
        // SAFETY: a signal to the process (group) this test started.
        assert_eq!(unsafe { libc::kill(target, signal) }, 0);
        let signalled = Instant::now();
        let status = loop {
            if let Some(status) = run.try_wait().unwrap() {
                break status;
            }
            if signalled.elapsed() > Duration::from_secs(30) {
                let _ = run.kill();
                panic!("{name}: the run did not stop within 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stopped_in = signalled.elapsed();
        let out = run.wait_with_output().unwrap();
        if signal == libc::SIGKILL {
            assert_eq!(status.signal(), Some(signal), "{status:?}");
            // PR_SET_PDEATHSIG: the kernel kills the orphaned child right after its parent died.
            let gone = Instant::now();
            while children.iter().any(|pid| alive(*pid)) {
                assert!(
                    gone.elapsed() < Duration::from_secs(10),
                    "a probe child outlived the killed run"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        assert_eq!(
            status.code(),
            Some(i32::from(Exit::COULD_NOT_RUN)),
            "{name}: {status:?}, stderr: {}",
            stderr(&out)
        );
        // At once, not at gds.read's deadline (60 s); the bound leaves room for a loaded machine.
        assert!(
            stopped_in < Duration::from_secs(10),
            "{name}: {stopped_in:?}"
        );
        eprintln!("{name}");
        let report: Value = json_out(Schema::Run, &out);
        assert_eq!(report["interrupted"], name);
        let r = result_of(&report, "gds.read");
        assert_eq!(r["status"], "error", "{r:#}");
        assert!(
            r["remediation"].as_str().unwrap().ends_with("run it again"),
            "{r:#}"
        );
        let summary = r["summary"].as_str().unwrap();
        // The hang is in cuFileHandleRegister; on a slow machine the signal may come just before the call.
        assert!(
            summary.starts_with(&format!("gds.read: interrupted by {name} in cuFile")),
            "{summary}"
        );
        let log = std::fs::read_to_string(libs.path().join("termination-log")).unwrap();
        assert!(
            log.starts_with(&format!("fabric-preflight ERROR (interrupted by {name}):")),
            "{log}"
        );
        let queued = result_of(&report, "gdr.loopback");
        assert_eq!(queued["status"], "error", "{queued:#}");
        assert_eq!(
            queued["summary"],
            format!("gdr.loopback: not started: the run was interrupted by {name}")
        );
        for bystander in BYSTANDERS {
            assert!(
                verdicts(&report)
                    .iter()
                    .any(|(i, _, s)| i == bystander && s == "pass"),
                "{name}: {bystander} lost"
            );
        }
        assert_eq!(
            files_under(gds_dir.path()),
            Vec::<PathBuf>::new(),
            "{name}: scratch left behind"
        );
        for pid in children {
            assert!(!alive(pid), "{name}: probe child {pid} survived");
        }
    }
}

/// An NVML that answers, with a driver version no recording has. It counts one GPU (no handle to it): counting
/// none while `hgx-healthy` has eight on the bus would be the presence rule's failure, not this test's subject.
const NVML_ANSWERS_999: &str = r#"
#include <string.h>
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 1; return 0; }
int nvmlSystemGetDriverVersion(char *v, unsigned int n) { strncpy(v, "999.1.2", n); return 0; }
"#;

/// `--root` without `vendor-answers.json` (a container mounting the host at /host) calls the libraries live;
/// with one, it replays them and never calls them. Each result built on library answers says which, and so does
/// the report: JSON, table and JUnit.
#[test]
fn root_without_recording_calls_live_libraries_and_every_result_says_live_or_recorded() {
    let libs = shims(&[("libnvidia-ml.so.1", NVML_ANSWERS_999)]);
    let p = profile(libs.path(), &[]);
    for (scenario, source, driver) in [
        ("hgx-healthy", "live", "999.1.2"),
        ("gpu-8x-h100-answers", "recorded", "550.90.07"),
    ] {
        let run = |format: &str| {
            let out = preflight()
                .env("LD_LIBRARY_PATH", libs.path())
                .env("COLUMNS", "200")
                .args(["run", "--color", "never", "--format", format, "--profile"])
                .arg(&p)
                .arg("--root")
                .arg(host(scenario))
                .args(["--only", "gpu.inventory,driver.nvidia"])
                .output()
                .unwrap();
            stdout(&out)
        };
        let out = run("json");
        let report: Value = json(Schema::Run, out.as_bytes());
        assert_eq!(report["library_answers"], source, "{scenario}");
        let inventory = result_of(&report, "gpu.inventory");
        assert!(
            inventory["summary"].as_str().unwrap().contains(driver),
            "{scenario}: {inventory:#}"
        );
        for c in report["checks"].as_array().unwrap() {
            let expected = if c["id"] == "gpu.inventory" {
                source
            } else {
                ""
            };
            assert_eq!(
                c["library_answers"].as_str().unwrap_or_default(),
                expected,
                "{scenario}: {c:#}"
            );
        }
        let text = run("table");
        assert!(text.contains(&format!("[{source}]")), "{text}");
        assert!(
            text.contains(&format!("library answers {source}")),
            "{text}"
        );
        let xml = run("junit");
        assert!(
            xml.contains(&format!(
                r#"<property name="library_answers" value="{source}"/>"#
            )),
            "{xml}"
        );
        assert!(xml.contains(&format!("library answers: {source}")), "{xml}");
    }
}
