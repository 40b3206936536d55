//! `gds.read`: judges a cuFile read into GPU memory (`measure::cufile_read`): GB/s, which path the reads took
//! (nvidia-fs, PCI P2PDMA, or compat mode) against the plain `pread` baseline. cuFile's failures become
//! diagnoses (udev record, filesystem, O_DIRECT, BAR1).

use std::time::Duration;

use crate::dynlib::cufile;
use crate::dynlib::LibError;
use crate::measure::cufile_read::{self, ReadRun, Shape, Stage};
use crate::model::Limit;
use crate::probe::{common, FindingCode, Library, Remedy};
use crate::probe::{
    CheckResult, Context, Explain, Kind, Measurement, Need, Probe, ProbeMeta, Status,
};
use crate::probes::shared::gpu::{expects_gpus, gpu_survey, mark_replayed};
use crate::rules::gds_target::{self, FsSupport, Target};
use crate::sysfs::modules::Modules;
use crate::sysfs::nvfs::NVFS_STATS;

pub struct GdsRead;

const ID: &str = "gds.read";
/// The key of the recorded answers (`vendor-answers.json`).
const ANSWER_KEY: &str = "cufile.gds_read";
const DEFAULT_FILE_MIB: u64 = 1024;
/// 64 MiB reads: large sequential requests measure the path, not per-call overhead, and match the reference
/// measurement of `reference-figures.md` §6 (cuda.bindings.cufile, 64 MiB reads).
const DEFAULT_BLOCK_KIB: u64 = 64 * 1024;

const FIX_NVFS: &str = "install and load nvidia-fs (`nvidia-fs-dkms` / `nvidia-gds`, `modprobe nvidia_fs`) or configure \
PCI P2PDMA; until then cuFile reads bounce through host memory";

const READ_FAILED: FindingCode = FindingCode {
    code: "GDS201",
    title: "cuFile could not complete a read into GPU memory",
    explanation: "A stage failed (loading libcufile, cuFileDriverOpen, registering the buffer or the file, the read): the summary names it with cuFile's answer and the fix the usual cause (a missing udev record, a filesystem cuFile cannot use, compat mode disallowed, BAR1 exhausted). A failure where the profile requires GDS, else a warning (a skip where libcufile is simply absent).",
    step: Some(Remedy::Reconfigure),
};
const READ_SHORT: FindingCode = FindingCode {
    code: "GDS202",
    title: "the cuFile read fell short: slow, in compat mode, with errors, or not the data written",
    explanation: "The read ran below `thresholds.gds_read_gbps`, took the compat path (POSIX through host memory) where GDS is expected, was not counted by nvidia-fs, counted read errors, returned data that does not match the file, or stopped early. The summary says which; compare with the POSIX baseline to tell the device from the GDS path.",
    step: Some(Remedy::Reconfigure),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "cuFile read into GPU memory: GB/s, the path taken (nvidia-fs / P2PDMA / compat), POSIX baseline",
    needs: &[Need::Gpu, Need::ScratchDir],
    kind: Kind::Active,
    libraries: &[Library::Cufile, Library::Cuda],
    facts: &[],
    timeout: Duration::from_secs(120),
    explain: Explain {
        reads: "libcufile (libcufile.so.0, then libcufile.so): cuFileGetVersion, cuFileDriverOpen, \
                cuFileDriverGetProperties, cuFileBufRegister, cuFileHandleRegister, cuFileRead, level-3 \
                statistics (n_nvfs_reads / n_p2p_reads / n_posix_reads); libcuda for the GPU buffer and the \
                baseline copy; /proc/driver/nvidia-fs/stats before and after; /proc/self/mountinfo and \
                /run/udev/data/b<maj>:<min> for diagnoses. Writes one test file (expect.gds_file_size_mib, \
                default 1 GiB) into a scratch directory under --gds-dir (default $TMPDIR or /tmp), removed \
                afterwards even on timeout; statvfs first: the file must leave 5% of the filesystem (at \
                least 1 GiB) free.",
        why: "A GDS install can look complete and still read every byte through host bounce buffers (compat \
              mode), and gdsio labels such runs GPU-direct. Only a real read with cuFile's own path counters \
              shows which path the bytes took and what it is worth against plain POSIX I/O.",
        fixes: &[
            ("compat mode (no nvidia-fs)", FIX_NVFS),
            ("cuFileHandleRegister 5027 with the udev record missing", "containers: `-v /run/udev:/run/udev:ro`; hosts without udev: create /run/udev/data/b<maj>:<min> with E:ID_FS_USAGE=filesystem"),
            ("O_DIRECT refused", "pass --gds-dir on ext4/xfs (tmpfs and overlay refuse O_DIRECT)"),
            ("cuFileBufRegister failed (BAR1)", "check `nvidia-smi -q -d MEMORY` BAR1 free; lower max_device_pinned_mem_size_kb or the block size"),
            ("throughput below gds_read_gbytes_per_sec", "compare with the POSIX baseline: both low = the storage; cuFile low only = the GDS path"),
        ],
    },
    findings: &[
        &READ_FAILED,
        &READ_SHORT,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GdsRead {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let dir = gds_target::target_dir(cx.inputs.gds_dir.as_deref(), cx.inputs.env("TMPDIR"));
        let subject = format!("{dir} -> GPU 0");
        let file_mib = cx
            .profile
            .expect
            .gds_file_size_mib
            .unwrap_or(DEFAULT_FILE_MIB)
            .max(1);
        let block_kib = cx
            .profile
            .expect
            .gds_block_size_kib
            .unwrap_or(DEFAULT_BLOCK_KIB)
            .max(4);
        let shape = Shape::new(file_mib << 20, block_kib << 10);
        let obtained = cx.answers.obtain(ANSWER_KEY, || match cx.scratch {
            Some(scratch) => cufile_read::collect(cx.host, scratch, shape, cx.deadline),
            None => ReadRun::failed(
                Stage::Setup,
                "no scratch directory was given to this active probe",
            ),
        });
        let (run, replayed) = match obtained {
            Ok(o) => (o.value, o.replayed),
            Err(e) => {
                return vec![CheckResult::error(ID, e)
                    .subject(subject)
                    .code(&common::LIBRARY_UNANSWERED)]
            }
        };
        // Diagnoses look at the directory the file was in: the scratch dir live, the target dir in a replay.
        let where_ = cx
            .scratch
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or(dir);
        if let Some(r) = presence(cx, &run) {
            return vec![mark_replayed(r, replayed).subject(subject)];
        }
        let target = gds_target::inspect(cx.host, &where_);
        let limit = cx
            .profile
            .thresholds
            .gds_read_gbytes_per_sec
            .unwrap_or_default();
        vec![judge(&run, &target, cx.profile.expect.gds, &limit, replayed).subject(subject)]
    }
}

/// The path the reads took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPath {
    NvidiaFs,
    P2pDma,
    Compat,
}

impl ReadPath {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadPath::NvidiaFs => "nvidia-fs (GPUDirect Storage)",
            ReadPath::P2pDma => "PCI P2PDMA (GPUDirect Storage)",
            ReadPath::Compat => "compat mode (POSIX through host memory)",
        }
    }
}

/// cuFile's statistics first; else nvidia-fs's own counter; else the driver properties (no nvidia-fs in use
/// means compat). Returns the path and how it was told.
pub fn detect_path(run: &ReadRun) -> Option<(ReadPath, &'static str)> {
    if let Some(c) = &run.counters {
        if c.nvfs_reads > 0 {
            return Some((ReadPath::NvidiaFs, "cuFile stats n_nvfs_reads"));
        }
        if c.p2p_reads > 0 {
            return Some((ReadPath::P2pDma, "cuFile stats n_p2p_reads"));
        }
        if c.posix_reads > 0 {
            return Some((ReadPath::Compat, "cuFile stats n_posix_reads"));
        }
    }
    if run.nvfs_reads_delta.is_some_and(|n| n > 0) {
        return Some((
            ReadPath::NvidiaFs,
            "/proc/driver/nvidia-fs/stats Reads n delta",
        ));
    }
    match &run.props {
        Some(p) if !p.nvfs_in_use() => Some((
            ReadPath::Compat,
            "cuFileDriverGetProperties: nvidia-fs version 0.0",
        )),
        _ => None,
    }
}

/// The presence rule (`presence.rs`) when the run stopped before cuFile or CUDA could be used: no GPU → skip;
/// a GPU without its driver → fail; the CUDA driver broken or absent → its verdict; libcufile absent while
/// nvidia_fs is loaded → error (GDS installed on the kernel side only).
fn presence(cx: &Context<'_>, run: &ReadRun) -> Option<CheckResult> {
    if !matches!(run.failed_at, Some(Stage::LoadCufile | Stage::Cuda)) {
        return None;
    }
    let survey = gpu_survey(cx);
    let expected = cx.profile.expect.gds == Some(true) || expects_gpus(cx);
    if let Some(r) = survey.gate(ID, expected) {
        return Some(r);
    }
    if let Some(e) = &run.cuda_error {
        return Some(survey.library_failed(ID, e, expected));
    }
    let nvfs_loaded = Modules::read(cx.host)
        .is_ok_and(|m| m.state(cx.host, "nvidia_fs").is_ok_and(|s| s.is_loaded()));
    (nvfs_loaded && !run.load_attempts.is_empty()).then(|| {
        let tried: Vec<String> = run
            .load_attempts
            .iter()
            .map(|(n, e)| format!("{n}: {e}"))
            .collect();
        survey
            .library_failed(
                ID,
                &LibError::not_loaded(Library::Cufile, tried.join("; ")),
                expected,
            )
            .note("/proc/modules [nvidia_fs] = loaded")
    })
}

/// A failed run's verdict: what broke, why, and the fix.
pub fn diagnose(
    run: &ReadRun,
    target: &Target,
    expect_gds: Option<bool>,
) -> (Status, String, Option<String>) {
    let required = expect_gds == Some(true);
    let stage = run.failed_at.unwrap_or(Stage::Setup);
    let error = run.error.clone().unwrap_or_default();
    let code = run.cufile_error.map(|e| e.code);
    let fs = target.mount.as_ref().ok();
    let absent = if required { Status::Fail } else { Status::Skip };
    // cuFile is present but this host's set-up keeps it from reading (no udev record, a filesystem or
    // directory it cannot use, compat mode disallowed): a failure where the profile needs GDS, a warning
    // under profiles that do not (the node may never use cuFile, and the scratch directory is our choice).
    let blocked = if required { Status::Fail } else { Status::Warn };
    if stage == Stage::LoadCufile && !run.load_attempts.is_empty() {
        let names: Vec<&str> = run.load_attempts.iter().map(|(n, _)| n.as_str()).collect();
        return (
            absent,
            format!("libcufile not found (tried {}): GPUDirect Storage not installed", names.join(", ")),
            Some("install the cuFile library (CUDA toolkit `libcufile` / `nvidia-gds`) or add its directory to the loader path".into()),
        );
    }
    if stage == Stage::DiskSpace {
        return (
            Status::Error,
            error,
            Some("free space on that filesystem, point --gds-dir at one with room, or lower expect.gds_file_size_mib".into()),
        );
    }
    // Loaded, then refused: a libcufile of a major version whose structures this tool does not know.
    if stage == Stage::LoadCufile && run.library.is_some() {
        return (
            Status::Error,
            error,
            Some("run a fabric-preflight release that knows this libcufile, or point the loader at a cuFile 1.x".into()),
        );
    }
    if stage == Stage::DriverOpen && code == Some(cufile::DRIVER_NOT_INITIALIZED) {
        return (
            blocked,
            format!("{error}: nvidia-fs is not loaded and compat mode is disallowed"),
            Some(FIX_NVFS.into()),
        );
    }
    if stage == Stage::OpenDirect {
        return (
            blocked,
            format!(
                "{error}: {} refuses O_DIRECT, so cuFile cannot read it",
                fs.map(|m| m.fs_type.as_str()).unwrap_or("the filesystem")
            ),
            Some("pass --gds-dir DIR on ext4/xfs or a GDS-capable distributed filesystem (not tmpfs/overlay)".into()),
        );
    }
    if stage == Stage::HandleRegister {
        if let (Some(cufile::HANDLE_NOT_REGISTERED), Some(p)) = (code, target.udev_problem()) {
            return (
                blocked,
                format!(
                    "{error} (\"file descriptor is not registered\"): {}; cuFile needs ID_FS_USAGE from the udev record of {}",
                    p.what,
                    fs.map(|m| m.source.as_str()).unwrap_or("the device")
                ),
                Some(p.fix),
            );
        }
        let unsupported_fs = fs.filter(|m| {
            matches!(
                gds_target::classify(m),
                FsSupport::CompatOnly | FsSupport::NoDirectIo
            )
        });
        if let (
            Some(
                cufile::IO_NOT_SUPPORTED
                | cufile::DEVICE_NOT_SUPPORTED
                | cufile::PLATFORM_NOT_SUPPORTED
                | cufile::HANDLE_NOT_REGISTERED,
            ),
            Some(m),
        ) = (code, unsupported_fs)
        {
            return (
                blocked,
                format!("{error}: {} is not a filesystem cuFile supports", m.fs_type),
                Some("point --gds-dir at ext4/xfs on NVMe, or Lustre/WekaFS/GPFS/BeeGFS/NFS over RDMA".into()),
            );
        }
        if matches!(
            code,
            Some(cufile::INVALID_FILE_OPEN_FLAG | cufile::DIO_NOT_SET)
        ) {
            return (
                blocked,
                format!("{error}: cuFile wants the file opened with O_DIRECT"),
                Some("the filesystem must accept O_DIRECT (ext4, xfs)".into()),
            );
        }
    }
    if stage == Stage::BufRegister
        && matches!(
            code,
            Some(
                cufile::GPU_MEMORY_PINNING_FAILED
                    | cufile::INTERNAL_BUF_REGISTER_ERROR
                    | cufile::INVALID_MAPPING_SIZE
            )
        )
    {
        return (
            Status::Fail,
            format!("{error}: the GPU buffer could not be pinned for DMA (BAR1 space exhausted or too small)"),
            Some("check `nvidia-smi -q -d MEMORY` (BAR1 Memory Usage); lower properties.max_device_pinned_mem_size_kb or gds_block_size_kib; enable large BAR (Resizable BAR) in the BIOS".into()),
        );
    }
    let log_names_udev = run.log_tail.iter().any(|l| l.contains("ID_FS_USAGE"));
    (
        Status::Fail,
        error,
        log_names_udev.then(|| "cuFile's log names a missing udev property: mount /run/udev into the container or create /run/udev/data/b<maj>:<min> with E:ID_FS_USAGE=filesystem".into()),
    )
}

pub fn judge(
    run: &ReadRun,
    target: &Target,
    expect_gds: Option<bool>,
    limit: &Limit,
    replayed: bool,
) -> CheckResult {
    let mut ev: Vec<String> = Vec::new();
    if let Some(lib) = &run.library {
        ev.push(format!("dlopen = {lib}"));
    }
    for (name, err) in &run.load_attempts {
        ev.push(format!("dlopen({name}) = {err}"));
    }
    if let Some(v) = run.version {
        ev.push(format!("cuFileGetVersion = {v}"));
    }
    if let Some(gpu) = &run.gpu {
        ev.push(format!("GPU 0 = {gpu}"));
    }
    if let Some(p) = &run.props {
        ev.push(format!(
            "cuFileDriverGetProperties = nvfs {}.{}, compat {}, poll mode {}, max_direct_io_size {} KiB, max_device_pinned_mem_size {} KiB",
            p.nvfs_major, p.nvfs_minor,
            if p.compat_allowed() { "allowed" } else { "disallowed" },
            if p.poll_mode() { "on" } else { "off" },
            p.max_direct_io_size_kb, p.max_device_pinned_mem_size_kb
        ));
    }
    if let Some(s) = &run.shape {
        ev.push(format!("test file = {} MiB read in {} KiB requests, O_DIRECT (page cache bypassed: a cold read of the device)", s.file_bytes >> 20, s.block_bytes >> 10));
    }
    if let Some(c) = &run.counters {
        ev.push(format!(
            "cuFileGetStatsL3 (delta) = reads {} (nvfs {}, p2p {}, posix {}), errors {}, {} bytes",
            c.total_reads, c.nvfs_reads, c.p2p_reads, c.posix_reads, c.read_errors, c.read_bytes
        ));
    }
    if let Some(e) = &run.stats_error {
        ev.push(format!("cuFile statistics = <{e}>"));
    }
    if let Some(n) = run.nvfs_reads_delta {
        ev.push(format!("{NVFS_STATS} [Reads n] delta = {n}"));
    }
    if let Some(v) = run.verified {
        ev.push(format!(
            "data check (last block copied back) = {}",
            if v { "matches" } else { "MISMATCH" }
        ));
    }
    if let Some(e) = &run.baseline_error {
        ev.push(format!("POSIX baseline = <{e}>"));
    }
    for l in &run.log_tail {
        ev.push(format!("cufile.log = {l}"));
    }
    ev.extend(target.evidence());

    if run.failed_at.is_some() && run.cufile.is_none() {
        let (status, summary, fix) = diagnose(run, target, expect_gds);
        let mut r = CheckResult::new(ID, status, summary).code(if status == Status::Skip {
            &common::ABSENT
        } else {
            &READ_FAILED
        });
        r.evidence = ev;
        r.remediation = fix;
        return r;
    }
    let Some(timing) = run.cufile else {
        let mut r = CheckResult::error(ID, "no cuFile read completed before the deadline")
            .code(&common::TIMED_OUT);
        r.evidence = ev;
        return r;
    };
    let gbps = timing.gbytes_per_sec();
    let mut measurements = vec![Measurement::new("gds_read_gbytes_per_sec", gbps, "GB/s")
        .judged_by(limit)
        .replayed(replayed)];
    let baseline = run.baseline.map(|b| b.gbytes_per_sec());
    if let Some(b) = baseline {
        measurements
            .push(Measurement::new("posix_read_h2d_gbytes_per_sec", b, "GB/s").replayed(replayed));
        if b > 0.0 {
            measurements.push(
                Measurement::new("cufile_to_posix_ratio", gbps / b, "ratio").replayed(replayed),
            );
        }
    }
    let path = detect_path(run);
    let mut status = limit.judge_min(gbps);
    let mut notes: Vec<String> = Vec::new();
    let mut fix = None;
    match path {
        Some((ReadPath::Compat, _)) if expect_gds == Some(true) => {
            status = Status::Fail;
            notes.push(
                "the profile requires GPUDirect Storage; compat mode fails however fast it is"
                    .into(),
            );
            fix = Some(FIX_NVFS.to_string());
        }
        Some((ReadPath::Compat, _)) if expect_gds.is_none() => {
            status = status.max(Status::Warn);
            fix = Some(FIX_NVFS.to_string());
        }
        // nvidia-fs counted none of these reads: whatever path they took, it was not nvidia-fs.
        None if run.nvfs_reads_delta == Some(0) => {
            status = status.max(if expect_gds == Some(true) {
                Status::Fail
            } else {
                Status::Warn
            });
            notes.push(format!(
                "nvidia-fs counted 0 of these reads ({NVFS_STATS} Reads n unchanged) and cuFile gave no statistics: not GPUDirect Storage through nvidia-fs"
            ));
            fix = Some(FIX_NVFS.to_string());
        }
        None => {
            if expect_gds == Some(true) {
                status = status.max(Status::Error);
            }
            notes.push("path unknown: no cuFile statistics and no nvidia-fs counters".into());
        }
        _ => {}
    }
    if let Some(c) = run.counters.filter(|c| c.read_errors > 0) {
        status = Status::Fail;
        notes.push(format!(
            "cuFile counted {} read error(s) in {} reads",
            c.read_errors, c.total_reads
        ));
    }
    if run.verified == Some(false) {
        status = Status::Fail;
        notes.push("data read back does not match the file".into());
    }
    if let Some(e) = &run.error {
        // A read that failed midway (EIO, a short read) is a storage fault, not a slow run.
        status = if run.failed_at == Some(Stage::Read) {
            Status::Fail
        } else {
            status.max(Status::Warn)
        };
        notes.push(format!("stopped early: {e}"));
    }
    if run.cut_short {
        status = status.max(Status::Warn);
        notes.push("cut short by the deadline (figure from the reads done)".into());
    }
    if status == Status::Fail && limit.fail.is_some_and(|f| gbps < f) && fix.is_none() {
        fix = Some("compare with the POSIX baseline: both low = the storage device; cuFile alone low = the GDS path (see cufile.json, nvidia-fs stats)".into());
    }
    let summary = format!(
        "cuFile read {:.2} GB/s via {}{}{}",
        gbps,
        path.map(|(p, _)| p.as_str()).unwrap_or("an unknown path"),
        baseline
            .map(|b| format!(
                "; POSIX pread + H2D {b:.2} GB/s (ratio {:.2})",
                if b > 0.0 { gbps / b } else { 0.0 }
            ))
            .unwrap_or_default(),
        if notes.is_empty() {
            String::new()
        } else {
            format!("; {}", notes.join("; "))
        }
    );
    let mut r = CheckResult::new(ID, status, summary).code(&READ_SHORT);
    for m in measurements {
        r = r.measure(m);
    }
    if let Some((_, how)) = path {
        ev.insert(0, format!("path = {how}"));
    }
    ev.push(format!(
        "cuFile timing = {} bytes in {:.3} s",
        timing.bytes, timing.seconds
    ));
    if let Some(b) = &run.baseline {
        ev.push(format!(
            "POSIX timing = {} bytes in {:.3} s",
            b.bytes, b.seconds
        ));
    }
    r.evidence = ev;
    r.remediation = fix;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynlib::cufile::{CuFileError, DriverProps, PathCounters};
    use crate::host::Host;
    use crate::measure::cufile_read::Timing;

    fn props(nvfs: bool) -> DriverProps {
        DriverProps {
            nvfs_major: if nvfs { 2 } else { 0 },
            nvfs_minor: if nvfs { 27 } else { 0 },
            poll_thresh_size_kb: 4,
            max_direct_io_size_kb: 16384,
            dstatusflags: 0,
            dcontrolflags: 0b10,
            fflags: 0,
            max_device_cache_size_kb: 131072,
            per_buffer_cache_size_kb: 1024,
            max_device_pinned_mem_size_kb: 33554432,
        }
    }

    fn h200_target(udev: Option<&str>) -> (tempfile::TempDir, Target) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("proc/self")).unwrap();
        std::fs::write(
            d.path().join("proc/self/mountinfo"),
            "22 1 254:0 / / rw - ext4 /dev/vda rw\n",
        )
        .unwrap();
        if let Some(text) = udev {
            std::fs::create_dir_all(d.path().join("run/udev/data")).unwrap();
            std::fs::write(d.path().join("run/udev/data/b254:0"), text).unwrap();
        }
        let t = gds_target::inspect(&Host::at(d.path()).unwrap(), "/tmp");
        (d, t)
    }

    fn compat_run() -> ReadRun {
        let mut r = ReadRun::empty();
        r.library = Some("libcufile.so.0".into());
        r.version = Some(1150);
        r.props = Some(props(false));
        r.shape = Some(Shape::new(1 << 30, 64 << 20));
        r.cufile = Some(Timing {
            bytes: 1 << 30,
            seconds: 0.55,
        });
        r.baseline = Some(Timing {
            bytes: 1 << 30,
            seconds: 0.5,
        });
        r.counters = Some(PathCounters {
            total_reads: 16,
            posix_reads: 16,
            read_bytes: 1 << 30,
            ..Default::default()
        });
        r.verified = Some(true);
        r
    }

    #[test]
    fn path_detection_prefers_cufile_counters() {
        let mut r = compat_run();
        assert_eq!(detect_path(&r).unwrap().0, ReadPath::Compat);
        r.counters = Some(PathCounters {
            nvfs_reads: 3,
            ..Default::default()
        });
        assert_eq!(detect_path(&r).unwrap().0, ReadPath::NvidiaFs);
        r.counters = None;
        r.nvfs_reads_delta = Some(0);
        assert_eq!(
            detect_path(&r).unwrap().0,
            ReadPath::Compat,
            "falls back to the properties"
        );
        r.props = Some(props(true));
        assert_eq!(detect_path(&r), None);
    }

    #[test]
    fn unknown_cufile_major_is_refused_as_an_error() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let mut run = ReadRun::empty();
        run.library = Some("libcufile.so.0".into());
        run.version = Some(2010);
        let refusal = crate::dynlib::cufile::StatsLayout::for_version(2010).unwrap_err();
        run.fail(Stage::LoadCufile, refusal);
        let r = judge(&run, &t, None, &Limit::default(), false);
        assert_eq!(r.status, Status::Error, "{}", r.summary);
        assert!(r.summary.contains("major version 2"), "{}", r.summary);
    }

    #[test]
    fn no_room_for_the_test_file_is_an_error_with_the_numbers() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let free = crate::measure::cufile_read::FreeSpace {
            available: 1 << 30,
            total: 8 << 30,
        };
        let mut run = ReadRun::empty();
        run.library = Some("libcufile.so.0".into());
        run.fail(Stage::DiskSpace, free.room_for(1 << 30).unwrap_err());
        let r = judge(&run, &t, Some(true), &Limit::default(), false);
        assert_eq!(r.status, Status::Error, "{}", r.summary);
        assert!(
            r.summary.contains("1.00 GiB free of 8.00 GiB"),
            "{}",
            r.summary
        );
    }

    /// Reproduced: an EIO after some blocks had been read was a warning and exit 0.
    #[test]
    fn eio_midway_fails() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let mut run = compat_run();
        run.errno = Some(libc::EIO);
        run.fail(
            Stage::Read,
            "cuFileRead at offset 536870912 = errno 5 (Input/output error)",
        );
        let r = judge(&run, &t, None, &Limit::default(), false);
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
        assert!(r.summary.contains("Input/output error"), "{}", r.summary);
    }

    /// Reproduced: no cuFile statistics and an nvidia-fs delta of 0 gave "an unknown path" and a pass.
    #[test]
    fn nvidia_fs_delta_of_zero_is_not_a_pass() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let mut run = compat_run();
        run.counters = None;
        run.props = Some(props(true));
        run.nvfs_reads_delta = Some(0);
        let r = judge(&run, &t, None, &Limit::default(), false);
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        assert!(r.summary.contains("nvidia-fs counted 0"), "{}", r.summary);
        let r = judge(&run, &t, Some(true), &Limit::default(), false);
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
    }

    #[test]
    fn cufile_read_errors_fail() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let mut run = compat_run();
        run.counters = Some(PathCounters {
            total_reads: 16,
            posix_reads: 16,
            read_errors: 3,
            ..Default::default()
        });
        let r = judge(&run, &t, None, &Limit::default(), false);
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
        assert!(r.summary.contains("3 read error(s)"), "{}", r.summary);
    }

    #[test]
    fn compat_run_is_labelled_compat_and_warns() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let r = judge(&compat_run(), &t, None, &Limit::default(), false);
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        assert!(r.summary.contains("compat mode"), "{}", r.summary);
        assert!(r.summary.contains("1.95 GB/s"), "{}", r.summary);
        assert_eq!(r.measurements[0].name, "gds_read_gbytes_per_sec");
        assert!(r
            .measurements
            .iter()
            .any(|m| m.name == "cufile_to_posix_ratio"));
        assert!(r
            .evidence
            .iter()
            .any(|e| e == "path = cuFile stats n_posix_reads"));
    }

    #[test]
    fn gds_profile_fails_compat_even_when_fast() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let limit = Limit::new(None, Some(1.0));
        let r = judge(&compat_run(), &t, Some(true), &limit, false);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary.contains("requires GPUDirect Storage"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn nvfs_run_below_threshold_fails() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let mut run = compat_run();
        run.props = Some(props(true));
        run.counters = Some(PathCounters {
            total_reads: 16,
            nvfs_reads: 16,
            ..Default::default()
        });
        let r = judge(
            &run,
            &t,
            Some(true),
            &Limit::new(Some(6.0), Some(5.0)),
            true,
        );
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("nvidia-fs"));
        assert!(r.measurements[0].replayed);
        let r = judge(
            &run,
            &t,
            Some(true),
            &Limit::new(Some(1.5), Some(1.0)),
            false,
        );
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
    }

    #[test]
    fn handle_register_5027_with_missing_udev_is_diagnosed() {
        let (_d, t) = h200_target(None);
        let mut run = ReadRun::failed(
            Stage::HandleRegister,
            "cuFileHandleRegister = CU_FILE_HANDLE_NOT_REGISTERED (5027)",
        );
        run.cufile_error = Some(CuFileError {
            code: 5027,
            cu_err: 0,
        });
        let r = judge(&run, &t, None, &Limit::default(), false);
        assert_eq!(
            r.status,
            Status::Warn,
            "blocked set-up warns where GDS is not required"
        );
        assert_eq!(
            judge(&run, &t, Some(true), &Limit::default(), false).status,
            Status::Fail
        );
        assert!(r.summary.contains("/run/udev/data/b254:0"), "{}", r.summary);
        assert!(r
            .remediation
            .as_deref()
            .unwrap()
            .contains("-v /run/udev:/run/udev:ro"));
    }

    #[test]
    fn o_direct_refusal_names_the_filesystem() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("proc/self")).unwrap();
        std::fs::write(
            d.path().join("proc/self/mountinfo"),
            "25 1 0:23 / /tmp rw - tmpfs tmpfs rw\n",
        )
        .unwrap();
        let t = gds_target::inspect(&Host::at(d.path()).unwrap(), "/tmp");
        let mut run = ReadRun::failed(
            Stage::OpenDirect,
            "open(/tmp/x, O_DIRECT): Invalid argument (os error 22)",
        );
        run.errno = Some(22);
        let (status, summary, fix) = diagnose(&run, &t, None);
        assert_eq!(status, Status::Warn);
        assert_eq!(diagnose(&run, &t, Some(true)).0, Status::Fail);
        assert!(summary.contains("tmpfs refuses O_DIRECT"), "{summary}");
        assert!(fix.unwrap().contains("--gds-dir"));
    }

    #[test]
    fn bar1_pinning_failure_is_diagnosed() {
        let (_d, t) = h200_target(Some("E:ID_FS_USAGE=filesystem\n"));
        let mut run = ReadRun::failed(
            Stage::BufRegister,
            "cuFileBufRegister = CU_FILE_GPU_MEMORY_PINNING_FAILED (5036)",
        );
        run.cufile_error = Some(CuFileError {
            code: 5036,
            cu_err: 0,
        });
        let (_, summary, fix) = diagnose(&run, &t, None);
        assert!(summary.contains("BAR1"), "{summary}");
        assert!(fix.unwrap().contains("nvidia-smi"));
    }

    #[test]
    fn missing_library_skips_unless_required() {
        let (_d, t) = h200_target(None);
        let mut run = ReadRun::failed(Stage::LoadCufile, "libcufile not found");
        run.load_attempts = vec![
            ("libcufile.so.0".into(), "not found".into()),
            ("libcufile.so".into(), "not found".into()),
        ];
        let r = judge(&run, &t, None, &Limit::default(), false);
        assert_eq!(r.status, Status::Skip);
        assert!(
            r.summary.contains("tried libcufile.so.0, libcufile.so"),
            "{}",
            r.summary
        );
        assert_eq!(
            judge(&run, &t, Some(true), &Limit::default(), false).status,
            Status::Fail
        );
    }

    #[test]
    fn driver_open_5001_names_nvidia_fs() {
        let (_d, t) = h200_target(None);
        let mut run = ReadRun::failed(
            Stage::DriverOpen,
            "cuFileDriverOpen = CU_FILE_DRIVER_NOT_INITIALIZED (5001)",
        );
        run.cufile_error = Some(CuFileError {
            code: 5001,
            cu_err: 0,
        });
        let (_, summary, _) = diagnose(&run, &t, None);
        assert!(summary.contains("nvidia-fs is not loaded"), "{summary}");
    }

    #[test]
    fn run_round_trips_through_json() {
        let run = compat_run();
        let back: ReadRun = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();
        assert_eq!(back, run);
    }
}
