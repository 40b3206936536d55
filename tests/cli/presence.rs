//! The presence rule (`src/rules/presence.rs`) for every check that calls a run-time-loaded library: hardware on the
//! PCI bus × kernel driver × user-space library → one verdict. Stand-in libraries are C shims compiled at test
//! time and found through `LD_LIBRARY_PATH`, the binary's real loading path (see `faults.rs`); the hardware and
//! the driver come from the recorded `hgx-healthy` tree, edited per state.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fabric_preflight::CUDA_REQUIRED_SYMBOLS as REQUIRED_SYMBOLS;
use serde_json::Value;

use super::faults::{profile, shims, HUNG_S, UNHURRIED_S};
use super::util::*;

/// Every check that calls NVML, CUDA, cuFile or libibverbs.
const LIBRARY_CHECKS: &[&str] = &[
    "gpu.inventory",
    "gpu.bar1",
    "gpu.p2p",
    "gpu.pcie",
    "gpu.copy_bandwidth",
    "gds.read",
    "rdma.loopback",
    "gdr.loopback",
];

/// Entry points the stand-in libcuda defines with a body of their own; every other required one returns 0.
const CUDA_DEFINED: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// `cuEventElapsedTime_v2` (CUDA 12.8+, R570), a stub timing every transfer at 1 ms.
const ELAPSED_V2: &str =
    "int cuEventElapsedTime_v2(float *ms, void *a, void *b) { *ms = 1.0f; return 0; }";
/// Its predecessor, all that drivers R535 to R565 (CUDA 12.2 to 12.7) export.
const ELAPSED_V1: &str =
    "int cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 1.0f; return 0; }";

/// A libcuda whose `cuInit` is `init` (C statements), listing no GPU, with `extra` (C definitions) besides the
/// common entry points.
fn cuda(init: &str, extra: &str) -> String {
    let mut c = String::from("#include <unistd.h>\n");
    for sym in REQUIRED_SYMBOLS
        .iter()
        .filter(|s| !CUDA_DEFINED.contains(s))
    {
        c.push_str(&format!("int {sym}() {{ return 0; }}\n"));
    }
    c.push_str(&format!(
        r#"int cuInit(unsigned flags) {{ {init} }}
int cuDriverGetVersion(int *v) {{ *v = 12020; return 0; }}
int cuDeviceGetCount(int *n) {{ *n = 0; return 0; }}
int cuGetErrorName(int e, const char **s) {{
    *s = e == 803 ? "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" : "CUDA_ERROR_UNKNOWN"; return 0; }}
int cuGetErrorString(int e, const char **s) {{
    *s = e == 803 ? "system has unsupported display driver / cuda driver combination" : "unknown error"; return 0; }}
{extra}
"#
    ));
    c
}

fn nvml(init: &str) -> String {
    format!(
        r#"#include <unistd.h>
int nvmlInit_v2(void) {{ {init} }}
int nvmlShutdown(void) {{ return 0; }}
int nvmlDeviceGetCount_v2(unsigned int *n) {{ *n = 0; return 0; }}
"#
    )
}

/// libcufile with every entry point the binary resolves except `missing`; `open` is cuFileDriverOpen's body.
fn cufile(missing: &str, open: &str) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <unistd.h>\ntypedef struct { int err; int cu_err; } S;\nstatic S ok(void) { S r = {0, 0}; return r; }\n",
    );
    for (sym, body) in [
        (
            "cuFileGetVersion",
            "S cuFileGetVersion(int *v) { *v = 1150; return ok(); }",
        ),
        ("cuFileDriverOpen", ""),
        (
            "cuFileDriverClose",
            "S cuFileDriverClose(void) { return ok(); }",
        ),
        (
            "cuFileDriverGetProperties",
            "S cuFileDriverGetProperties(void *p) { return ok(); }",
        ),
        (
            "cuFileBufRegister",
            "S cuFileBufRegister(const void *p, size_t n, int f) { return ok(); }",
        ),
        (
            "cuFileBufDeregister",
            "S cuFileBufDeregister(const void *p) { return ok(); }",
        ),
        (
            "cuFileHandleRegister",
            "S cuFileHandleRegister(void **h, void *d) { return ok(); }",
        ),
        (
            "cuFileHandleDeregister",
            "void cuFileHandleDeregister(void *h) {}",
        ),
        (
            "cuFileRead",
            "long cuFileRead(void *h, void *p, size_t n, long o, long d) { return -1; }",
        ),
    ] {
        if sym == missing {
            continue;
        }
        if sym == "cuFileDriverOpen" {
            c.push_str(&format!("S cuFileDriverOpen(void) {{ {open} }}\n"));
        } else {
            c.push_str(body);
            c.push('\n');
        }
    }
    c
}

fn verbs(list: &str) -> String {
    format!(
        r#"#include <stdlib.h>
#include <unistd.h>
void **ibv_get_device_list(int *n) {{ {list} }}
void ibv_free_device_list(void **l) {{ free(l); }}
"#
    )
}

const HANG: &str = "for (;;) pause(); return 0;";

/// A copy of `hgx-healthy` with `edit` applied.
fn edited_tree(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", host("hgx-healthy").display()))
        .arg(dir.path())
        .status()
        .expect("cp runs");
    assert!(status.success());
    edit(dir.path());
    dir
}

/// Removes the named modules' `/proc/modules` lines and `/sys/module` directories, and `paths`.
fn unload(root: &Path, modules: &[&str], paths: &[&str]) {
    let table = root.join("proc/modules");
    let kept: String = std::fs::read_to_string(&table)
        .unwrap()
        .lines()
        .filter(|l| !modules.contains(&l.split(' ').next().unwrap_or("")))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&table, kept).unwrap();
    for m in modules {
        let _ = std::fs::remove_dir_all(root.join("sys/module").join(m));
    }
    for p in paths {
        let full = root.join(p);
        if full.is_dir() {
            std::fs::remove_dir_all(&full).unwrap();
            std::fs::create_dir(&full).unwrap();
        } else {
            let _ = std::fs::remove_file(&full);
        }
    }
}

fn no_nvidia_driver(root: &Path) {
    unload(
        root,
        &["nvidia", "nvidia_uvm", "nvidia_peermem", "nvidia_fs"],
        &["proc/driver/nvidia", "proc/driver/nvidia-fs"],
    );
}

fn no_rdma_driver(root: &Path) {
    unload(
        root,
        &["mlx5_ib", "ib_uverbs"],
        &["sys/class/infiniband", "sys/class/infiniband_verbs"],
    );
}

/// `run --only <checks>` on `root` with `libs` first on the library search path; every check's deadline
/// [`UNHURRIED_S`] (it was 2 s, and a stand-in NVML once took longer than that to answer in a loaded CI).
fn run(root: &Path, libs: &Path, checks: &[&str]) -> (u8, Value, Duration) {
    run_hung(root, libs, checks, &[])
}

/// [`run`], the checks in `hung` (those that call the hanging library) with a deadline of [`HUNG_S`].
fn run_hung(root: &Path, libs: &Path, checks: &[&str], hung: &[&str]) -> (u8, Value, Duration) {
    let timeouts: Vec<(&str, u64)> = checks
        .iter()
        .map(|c| {
            (
                *c,
                if hung.contains(c) {
                    HUNG_S
                } else {
                    UNHURRIED_S
                },
            )
        })
        .collect();
    let p = profile(libs, &timeouts);
    let gds_dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let out = preflight()
        .env("LD_LIBRARY_PATH", libs)
        .args(["run", "--format", "json", "--color", "never", "--root"])
        .arg(root)
        .arg("--profile")
        .arg(&p)
        .args(["--only", &checks.join(",")])
        .arg("--gds-dir")
        .arg(gds_dir.path())
        .output()
        .expect("binary runs");
    let elapsed = started.elapsed();
    let report: Value = json_out(Schema::Run, &out);
    (code(&out), report, elapsed)
}

/// One deadline, not two: a run with a hung library ends before a second [`HUNG_S`] could pass, which leaves
/// [`HUNG_S`] for starting the binary and the other checks on a loaded machine.
fn one_deadline_not_two(elapsed: Duration) {
    assert!(
        elapsed < Duration::from_secs(2 * HUNG_S),
        "one deadline, not two: {elapsed:?}"
    );
}

/// Each check's one result has `status` and a summary containing one of `words` (per check).
fn expect_all(report: &Value, status: &str, words: impl Fn(&str) -> &'static str) {
    for id in LIBRARY_CHECKS {
        let r = result_of(report, id);
        let summary = r["summary"].as_str().unwrap_or_default();
        assert_eq!(r["status"], status, "{id}: {r:#}");
        assert!(
            summary.contains(words(id)),
            "{id}: expected `{}` in {summary:?}",
            words(id)
        );
    }
}

/// The real library is on this machine's loader path: a stand-in directory cannot make it absent.
fn system_has(soname: &str) -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(soname))
        .unwrap_or(false)
}

/// Hardware and drivers in place, libraries absent (a container without the NVIDIA runtime or rdma-core):
/// error, saying what to mount or install.
#[test]
fn drivers_loaded_libraries_absent_is_an_error_saying_what_to_install() {
    // The library each check loads first; a check whose library this machine has cannot be tested here.
    let first_library = |id: &str| match id {
        "gds.read" => "libcufile.so.0",
        "gdr.loopback" | "rdma.loopback" => "libibverbs.so.1",
        "gpu.copy_bandwidth" => "libcuda.so.1",
        _ => "libnvidia-ml.so.1",
    };
    let (testable, held): (Vec<&str>, Vec<&str>) = LIBRARY_CHECKS
        .iter()
        .partition(|id| !system_has(first_library(id)));
    if !held.is_empty() {
        eprintln!("not tested here: {held:?} (this machine has their library, which no stand-in directory can hide)");
    }
    assert!(!testable.is_empty(), "this machine has every library");
    let empty = tempfile::tempdir().unwrap();
    let (code, report, _) = run(&host("hgx-healthy"), empty.path(), &testable);
    for id in &testable {
        let r = result_of(&report, id);
        assert_eq!(r["status"], "error", "{id}: {r:#}");
        let summary = r["summary"].as_str().unwrap();
        let expected = format!("{} cannot be loaded", first_library(id));
        assert!(summary.contains(&expected), "{id}: {summary}");
        let fix = r["remediation"].to_string();
        assert!(
            fix.contains("install") || fix.contains("mount"),
            "{id}: {fix}"
        );
    }
    assert_eq!(code, Exit::COULD_NOT_RUN);
}

/// Libraries that load and then refuse: fail, with the library's own words.
#[test]
fn broken_libraries_fail_with_their_own_words() {
    let libs = shims(&[
        ("libnvidia-ml.so.1", &nvml("return 18;")),
        ("libcuda.so.1", &cuda("return 803;", ELAPSED_V2)),
        ("libcufile.so.0", &cufile("cuFileRead", "return ok();")),
        // A device list with nothing in it while /sys/class/infiniband lists eight devices.
        (
            "libibverbs.so.1",
            &verbs("*n = 0; return calloc(1, sizeof(void *));"),
        ),
    ]);
    let (code, report, _) = run(&host("hgx-healthy"), libs.path(), LIBRARY_CHECKS);
    expect_all(&report, "fail", |id| match id {
        "gds.read" => "lacks cuFileRead",
        "gdr.loopback" | "rdma.loopback" => {
            "libibverbs.so.1 lists no device while 8 RDMA-capable NIC(s)"
        }
        "gpu.copy_bandwidth" => "cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        _ => "nvmlInit_v2: NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    });
    let fix = result_of(&report, "gpu.inventory")["remediation"].to_string();
    assert!(fix.contains("reboot"), "{fix}");
    for id in ["gdr.loopback", "rdma.loopback"] {
        let fix = result_of(&report, id)["remediation"].to_string();
        assert!(fix.contains("ibverbs-providers"), "{id}: {fix}");
    }
    assert_eq!(code, Exit::CHECK_FAILED);
}

/// A CUDA driver older than every entry point this tool can use: fail naming the symbols.
#[test]
fn cuda_without_the_symbols_this_tool_calls_fails_naming_them() {
    let libs = shims(&[("libcuda.so.1", &cuda("return 0;", ""))]);
    let (code, report, _) = run(&host("hgx-healthy"), libs.path(), &["gpu.copy_bandwidth"]);
    let r = result_of(&report, "gpu.copy_bandwidth");
    assert_eq!(r["status"], "fail", "{r:#}");
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("lacks cuEventElapsedTime"),
        "{r:#}"
    );
    assert_eq!(code, Exit::CHECK_FAILED);
}

/// A library that hangs costs one deadline, once: every later check that needs it reports at once, naming
/// the call; checks that do not need it still run.
#[test]
fn a_hung_library_is_reported_once_and_not_called_again() {
    let libs = shims(&[
        ("libnvidia-ml.so.1", &nvml(HANG)),
        ("libcuda.so.1", &cuda("return 0;", ELAPSED_V2)),
    ]);
    // gpu.inventory hangs in nvmlInit_v2 (HUNG_S); gpu.pcie needs NVML too and would hang another HUNG_S;
    // gpu.copy_bandwidth needs only CUDA.
    let checks = ["gpu.inventory", "gpu.pcie", "gpu.copy_bandwidth"];
    let (_, report, elapsed) = run_hung(&host("hgx-healthy"), libs.path(), &checks, &checks[..2]);
    let inventory = result_of(&report, "gpu.inventory");
    assert_eq!(inventory["status"], "error");
    assert!(inventory["summary"]
        .as_str()
        .unwrap()
        .contains("in nvmlInit_v2"));
    let pcie = result_of(&report, "gpu.pcie");
    assert_eq!(pcie["status"], "error", "{pcie:#}");
    assert!(
        pcie["summary"].as_str().unwrap().contains(
            "not run: libnvidia-ml.so.1 hung in nvmlInit_v2 earlier in this run (gpu.inventory"
        ),
        "{pcie:#}"
    );
    // Reported without waiting for a deadline of its own.
    assert!(
        pcie["duration_ms"].as_u64().unwrap() < HUNG_S * 1000,
        "{pcie:#}"
    );
    // Ran, and judged what CUDA said (no GPU listed while eight are on the bus).
    let copy = result_of(&report, "gpu.copy_bandwidth");
    assert_eq!(copy["status"], "fail", "{copy:#}");
    one_deadline_not_two(elapsed);
}

/// The NVML checks judge one inventory, gathered once per run: NVML is initialised once for all of them (it was
/// once per check, each in a child of its own).
#[test]
fn nvml_is_asked_once_for_every_check_that_judges_it() {
    let log = tempfile::tempdir().expect("temp dir");
    let inits = log.path().join("inits");
    // O_WRONLY | O_APPEND | O_CREAT, declared here: the shim's template includes unistd.h alone.
    let libs = shims(&[(
        "libnvidia-ml.so.1",
        &nvml(&format!(
            r#"extern int open(const char *, int, ...); int fd = open("{}", 02101, 0644); write(fd, "i", 1); close(fd); return 0;"#,
            inits.display()
        )),
    )]);
    let checks = ["gpu.inventory", "gpu.bar1", "gpu.p2p"];
    let (_, report, _) = run(&host("hgx-healthy"), libs.path(), &checks);
    for id in checks {
        let r = result_of(&report, id);
        assert_eq!(r["library_answers"], "live", "{r:#}");
    }
    assert_eq!(
        std::fs::read_to_string(&inits).unwrap_or_default(),
        "i",
        "nvmlInit_v2 calls in one run"
    );
}

/// The same for libibverbs: rdma.loopback hangs in `ibv_get_device_list` once, gdr.loopback after it is not
/// called again.
#[test]
fn a_hung_libibverbs_is_reported_once() {
    let libs = shims(&[("libibverbs.so.1", &verbs(HANG))]);
    let checks = ["rdma.loopback", "gdr.loopback"];
    let (_, report, elapsed) = run_hung(&host("hgx-healthy"), libs.path(), &checks, &checks);
    let first = result_of(&report, "rdma.loopback");
    assert_eq!(first["status"], "error", "{first:#}");
    assert!(
        first["summary"]
            .as_str()
            .unwrap()
            .contains("in ibv_get_device_list"),
        "{first:#}"
    );
    let later = result_of(&report, "gdr.loopback");
    assert!(
        later["summary"].as_str().unwrap().contains(
            "not run: libibverbs.so.1 hung in ibv_get_device_list earlier in this run (rdma.loopback"
        ),
        "{later:#}"
    );
    one_deadline_not_two(elapsed);
}

/// No GPU and no NIC on the bus: every check skips, whatever the libraries say (a CPU node whose image
/// carries NVIDIA's libraries).
#[test]
fn hardware_absent_skips_whatever_the_libraries_say() {
    let libs = shims(&[
        ("libnvidia-ml.so.1", &nvml("return 9;")),
        ("libcuda.so.1", &cuda("return 100;", ELAPSED_V2)),
    ]);
    let root = tree(&[
        ("/proc/modules", ""),
        (
            "/proc/self/mountinfo",
            "22 1 254:0 / / rw - ext4 /dev/vda rw\n",
        ),
        ("/sys/bus/pci/devices/.keep", ""),
    ]);
    std::fs::remove_file(root.path().join("sys/bus/pci/devices/.keep")).unwrap();
    let (code, report, _) = run(root.path(), libs.path(), LIBRARY_CHECKS);
    expect_all(&report, "skip", |id| match id {
        "rdma.loopback" => "no RDMA-capable NIC on this host",
        _ => "no NVIDIA GPU on this host",
    });
    assert_eq!(code, Exit::OK);
}

/// GPUs and NICs on the bus with their drivers unloaded: every library check fails naming the devices.
#[test]
fn hardware_without_its_driver_fails_naming_the_devices() {
    let libs = shims(&[
        ("libnvidia-ml.so.1", &nvml("return 9;")),
        ("libcuda.so.1", &cuda("return 100;", ELAPSED_V2)),
    ]);
    let root = edited_tree(|r| {
        no_nvidia_driver(r);
        no_rdma_driver(r);
    });
    let (code, report, _) = run(root.path(), libs.path(), LIBRARY_CHECKS);
    expect_all(&report, "fail", |id| {
        match id {
        "rdma.loopback" => {
            "8 RDMA-capable NIC(s) on the PCI bus without an RDMA driver (mlx5_ib for ConnectX): NIC0 0000:19:00.0"
        }
        _ => "8 NVIDIA GPU(s) on the PCI bus without the NVIDIA kernel driver (nvidia): GPU0 0000:18:00.0",
    }
    });
    assert_eq!(code, Exit::CHECK_FAILED);
}

/// Issue 11 §1, reproduced: the recorded HGX tree with the nvidia modules and /proc/driver/nvidia removed
/// gave `SKIP driver.nvidia` next to `PASS pcie.link GPU0`, exit 0.
#[test]
fn hgx_tree_without_nvidia_modules_fails_driver_nvidia() {
    let root = edited_tree(no_nvidia_driver);
    let (code, report) = run_json(
        root.path(),
        "generic",
        &["--only", "driver.nvidia,pcie.link"],
    );
    let r = result_of(&report, "driver.nvidia");
    assert_eq!(r["status"], "fail", "{r:#}");
    let summary = r["summary"].as_str().unwrap();
    assert!(
        summary.contains("GPU0 0000:18:00.0") && summary.contains("and 5 more"),
        "{summary}"
    );
    assert!(
        r["evidence"].to_string().contains("GPU7 0000:cb:00.0"),
        "{r:#}"
    );
    assert_eq!(code, Exit::CHECK_FAILED);
}

/// Issue 11 §1, reproduced: with mlx5_ib unloaded, `rdma.devices` skipped while `pcie.link` listed the NICs.
#[test]
fn hgx_tree_without_mlx5_ib_fails_rdma_devices() {
    let root = edited_tree(no_rdma_driver);
    let (code, report) = run_json(
        root.path(),
        "generic",
        &["--only", "rdma.devices,rdma.link,rdma.roce,pcie.link"],
    );
    for id in ["rdma.devices", "rdma.link", "rdma.roce"] {
        let r = result_of(&report, id);
        assert_eq!(r["status"], "fail", "{r:#}");
        let summary = r["summary"].as_str().unwrap();
        assert!(
            summary.contains("8 RDMA-capable NIC(s) on the PCI bus without an RDMA driver")
                && summary.contains("NIC0 0000:19:00.0"),
            "{summary}"
        );
        assert!(r["remediation"].to_string().contains("mlx5_ib"));
    }
    assert_eq!(code, Exit::CHECK_FAILED);
}

/// Issue 11 §3: a driver of R535-R565 (CUDA 12.2-12.7) exports `cuEventElapsedTime` but not its `_v2`; it was
/// reported "too old" (`lacks cuEventElapsedTime_v2`). Now it loads and the check goes on to what it lists.
/// (`dynlib::cuda`'s unit test times an event through the older entry point.)
#[test]
fn a_driver_without_the_v2_entry_points_loads() {
    let libs = shims(&[("libcuda.so.1", &cuda("return 0;", ELAPSED_V1))]);
    let (_, report, _) = run(&host("hgx-healthy"), libs.path(), &["gpu.copy_bandwidth"]);
    let r = result_of(&report, "gpu.copy_bandwidth");
    let summary = r["summary"].as_str().unwrap();
    assert!(
        summary.contains("libcuda.so.1 lists no device while 8 NVIDIA GPU(s)"),
        "{r:#}"
    );
}

/// A GPU's own sysfs `driver` link decides where there is one: a container lists only its GPUs under
/// /proc/driver/nvidia/gpus yet sees the whole bus (not unbound), while a GPU bound to vfio-pci is named.
#[test]
fn the_sysfs_driver_link_tells_a_hidden_gpu_from_an_unbound_one() {
    let root = edited_tree(|r| {
        let link = |bdf: &str, driver: &str| {
            std::os::unix::fs::symlink(
                format!("../../../../bus/pci/drivers/{driver}"),
                r.join("sys/bus/pci/devices").join(bdf).join("driver"),
            )
            .unwrap();
        };
        // Visible to this container.
        link("0000:18:00.0", "nvidia");
        // Another pod's GPU: bound on the host, hidden from this container's /proc.
        link("0000:29:00.0", "nvidia");
        std::fs::remove_dir_all(r.join("proc/driver/nvidia/gpus/0000:29:00.0")).unwrap();
        // Passed through to a VM.
        link("0000:3a:00.0", "vfio-pci");
        std::fs::remove_dir_all(r.join("proc/driver/nvidia/gpus/0000:3a:00.0")).unwrap();
    });
    let (_, report) = run_json(root.path(), "generic", &["--only", "driver.nvidia"]);
    let r = result_of(&report, "driver.nvidia");
    let summary = r["summary"].as_str().unwrap();
    assert_eq!(r["status"], "fail", "{r:#}");
    assert!(
        summary.contains("GPU2 0000:3a:00.0 (bound to vfio-pci)")
            && !summary.contains("0000:29:00.0"),
        "{summary}"
    );
}

/// A pod given no GPU on a GPU node: the bus shows GPUs bound to nvidia (sysfs links), the container's
/// /proc/driver/nvidia/gpus is empty and NVML lists none. It could not run its GPU checks: an error saying so,
/// not a skip ("no GPU here") and not a fail (nothing is broken).
#[test]
fn a_container_given_no_gpu_is_an_error_saying_so() {
    let libs = shims(&[("libnvidia-ml.so.1", &nvml("return 0;"))]);
    let root = edited_tree(|r| {
        for bdf in std::fs::read_dir(r.join("proc/driver/nvidia/gpus")).unwrap() {
            let bdf = bdf.unwrap().file_name();
            std::os::unix::fs::symlink(
                "../../../../bus/pci/drivers/nvidia",
                r.join("sys/bus/pci/devices").join(&bdf).join("driver"),
            )
            .unwrap();
        }
        std::fs::remove_dir_all(r.join("proc/driver/nvidia/gpus")).unwrap();
        std::fs::create_dir(r.join("proc/driver/nvidia/gpus")).unwrap();
    });
    let (code, report, _) = run(root.path(), libs.path(), &["gpu.inventory"]);
    let r = result_of(&report, "gpu.inventory");
    assert_eq!(r["status"], "error", "{r:#}");
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("no GPU is exposed to this container"),
        "{r:#}"
    );
    assert_eq!(code, Exit::COULD_NOT_RUN);
}
