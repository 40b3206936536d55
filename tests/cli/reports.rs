//! Reports as fleets consume them: Prometheus names that `promtool check metrics` accepts, JSON that matches
//! the shipped schemas, JUnit suites that do not collide across nodes, `--quiet`, `--profile auto`, and the
//! generated completions, manual page and version.

use super::util::*;

fn run(tree: &std::path::Path, args: &[&str]) -> std::process::Output {
    preflight()
        .args(["run", "--color", "never", "--root"])
        .arg(tree)
        .args(args)
        .output()
        .unwrap()
}

/// The naming rules of `promtool check metrics` (client_golang's promlint) for gauges: an abbreviated unit
/// as a word, a non-base unit (`bits`, `milliseconds`, `kilobytes`), a reserved suffix, a type name.
fn lint(text: &str) -> Vec<String> {
    let abbreviated = [
        "s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d",
    ];
    let prefixes = [
        "", "pico", "nano", "micro", "milli", "centi", "deci", "deca", "hecto", "kilo", "kibi",
        "mega", "mibi", "giga", "gibi", "tera", "tebi", "peta", "pebi",
    ];
    let non_base = [
        "bits", "minutes", "hours", "days", "weeks", "kelvins", "inches",
    ];
    let mut problems = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap_or_default();
        let mut add = |why: &str| problems.push(format!("{name}: {why}"));
        for word in name.split('_') {
            if abbreviated.contains(&word) {
                add("abbreviated unit");
            }
            if non_base.contains(&word)
                || prefixes[1..].iter().any(|p| {
                    word.strip_prefix(p).is_some_and(|u| {
                        [
                            "bytes", "seconds", "meters", "grams", "joules", "volts", "amperes",
                        ]
                        .contains(&u)
                    })
                })
            {
                add("non-base unit");
            }
        }
        for suffix in ["_total", "_count", "_sum", "_bucket"] {
            if name.ends_with(suffix) {
                add("reserved suffix");
            }
        }
        for t in ["counter", "gauge", "histogram", "summary"] {
            if name.contains(&format!("_{t}_")) || name.ends_with(&format!("_{t}")) {
                add("type in name");
            }
        }
        if name.contains(':') || name.chars().any(|c| c.is_ascii_uppercase()) {
            add("reserved character or camelCase");
        }
    }
    problems
}

#[test]
fn prometheus_lint_flags_the_names_promtool_flagged() {
    // What the renderer wrote before its names were linted (error_counts_total, pcie_replay_count,
    // gds_read_gbytes_per_sec in GB/s, rate in Gb/s), as promtool reported them.
    let old = "# TYPE fabric_preflight_error_counts_total gauge\n\
               # TYPE fabric_preflight_pcie_replay_count gauge\n\
               # TYPE fabric_preflight_gds_read_gbytes_per_sec_bytes_per_second gauge\n\
               # TYPE fabric_preflight_rate_bits_per_second gauge\n";
    assert_eq!(lint(old).len(), 4, "{:?}", lint(old));
}

#[test]
fn prometheus_is_lint_clean_on_every_recorded_tree() {
    for tree in trees() {
        for profile in ["generic", "auto"] {
            let out = run(&tree, &["--profile", profile, "--format", "prometheus"]);
            let text = stdout(&out);
            let what = format!("{} --profile {profile}", tree.display());
            assert!(matches!(code(&out), 0 | 1 | 3), "{what}: {}", stderr(&out));
            assert_eq!(lint(&text), Vec::<String>::new(), "{what}\n{text}");
            assert!(
                text.lines().any(|l| l.starts_with("fabric_preflight_info{")
                    && l.contains(",host=\"")
                    && l.ends_with(" 1")),
                "{what}: no info metric\n{text}"
            );
        }
    }
}

#[test]
fn schemas_are_valid_draft_2020_12() {
    for schema in Schema::ALL {
        let doc = schema.document();
        assert_eq!(
            doc["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        jsonschema::meta::validate(&doc).unwrap_or_else(|e| panic!("{schema:?}: {e}"));
    }
}

#[test]
fn json_of_every_recorded_tree_and_log_matches_its_schema() {
    for tree in trees() {
        for profile in ["generic", "auto", "hgx-h100-ib"] {
            json_out(
                Schema::Run,
                &run(&tree, &["--profile", profile, "--format", "json"]),
            );
        }
        let topo = preflight()
            .args(["topo", "--format", "json", "--root"])
            .arg(&tree)
            .output()
            .unwrap();
        if code(&topo) == 0 {
            json_out(Schema::Topo, &topo);
        }
    }
    for entry in std::fs::read_dir(testdata("nccl")).unwrap() {
        let log = entry.unwrap().path();
        if log.extension().is_some_and(|e| e == "log") {
            let out = preflight()
                .args(["nccl", "--format", "json"])
                .arg(&log)
                .output()
                .unwrap();
            json_out(Schema::Nccl, &out);
        }
    }
}

#[test]
fn schema_rejects_a_report_missing_a_field() {
    let (_, mut report) = run_json(&host("hgx-healthy"), "generic", &["--only", "rdma.link"]);
    report.as_object_mut().unwrap().remove("exit_code");
    let text = serde_json::to_vec(&report).unwrap();
    assert!(std::panic::catch_unwind(|| json(Schema::Run, &text)).is_err());
}

#[test]
fn run_report_carries_timestamp_exit_code_strict_and_node_name() {
    // Translated IOMMU on a GPU+NIC node warns under generic: exit 0, or 1 with --strict.
    let tree = host("iommu-translated");
    let (code_plain, plain) = run_json(&tree, "generic", &["--only", "pcie.iommu"]);
    assert_eq!(plain["status"], "warn", "{plain}");
    assert_eq!(
        (code_plain, &plain["exit_code"], &plain["strict"]),
        (0, &0.into(), &false.into())
    );
    let (code_strict, strict) = run_json(&tree, "generic", &["--only", "pcie.iommu", "--strict"]);
    assert_eq!(
        (code_strict, &strict["exit_code"], &strict["strict"]),
        (1, &1.into(), &true.into())
    );
    let ts = strict["timestamp"].as_str().unwrap();
    assert!(
        ts.len() == 20 && ts.ends_with('Z') && ts.starts_with("20"),
        "{ts}"
    );
    let hostname = strict["host"]["hostname"].as_str().unwrap();
    assert_eq!(strict["host"]["node_name"], hostname);

    let out = preflight()
        .env("NODE_NAME", "k8s-node-3")
        .args(["run", "--format", "json", "--only", "pcie.iommu", "--root"])
        .arg(&tree)
        .output()
        .unwrap();
    assert_eq!(
        json_out(Schema::Run, &out)["host"]["node_name"],
        "k8s-node-3"
    );
    let (_, named) = run_json(
        &tree,
        "generic",
        &["--only", "pcie.iommu", "--node-name", "gpu-07"],
    );
    assert_eq!(named["host"]["node_name"], "gpu-07");
    // A pod's own hostname names the pod: the node's name replaces it.
    assert_eq!(named["host"]["hostname"], "gpu-07");
}

#[test]
fn junit_suite_is_named_after_the_node() {
    let out = run(
        &host("hgx-healthy"),
        &[
            "--only",
            "rdma.link",
            "--format",
            "junit",
            "--node-name",
            "gpu-node-07",
        ],
    );
    let xml = stdout(&out);
    assert!(xml.contains(r#"<testsuite name="gpu-node-07" "#), "{xml}");
}

#[test]
fn quiet_shows_only_what_fails_the_run() {
    let out = run(&host("ib-port-down"), &["--quiet"]);
    assert_eq!(code(&out), Exit::CHECK_FAILED);
    let text = stdout(&out);
    assert!(
        text.contains("FAIL") && text.contains("rdma.link"),
        "{text}"
    );
    assert!(
        !text.contains("PASS  ") && !text.contains("│ PASS"),
        "{text}"
    );
    assert!(
        !text.contains("│ SKIP") && !text.contains("│ WARN"),
        "{text}"
    );

    let healthy = run(&host("hgx-healthy"), &["--quiet", "--only", "rdma.link"]);
    assert_eq!(code(&healthy), Exit::OK);
    assert_eq!(stdout(&healthy), "");
    // Machine formats stay whole.
    let json = run(&host("ib-port-down"), &["--quiet", "--format", "json"]);
    let report = json_out(Schema::Run, &json);
    assert!(verdicts(&report).iter().any(|(_, _, s)| s == "pass"));
}

#[test]
fn auto_profile_picks_by_what_the_host_shows_and_says_why() {
    for (tree, want) in [
        ("hgx-healthy", "hgx-h100-ib"),
        ("roce-mtu-1500", "roce-400g"),
        ("h200-vm-no-rdma", "gpu-only"),
    ] {
        let (_, report) = run_json(&host(tree), "auto", &[]);
        assert_eq!(report["profile"], want, "{tree}");
        let selection = &report["profile_selection"];
        assert_eq!(selection["requested"], "auto");
        assert!(
            selection["reasons"][1]
                .as_str()
                .unwrap()
                .starts_with(&format!("picked {want}: ")),
            "{tree}: {selection}"
        );
    }
    let (_, named) = run_json(&host("hgx-healthy"), "generic", &["--only", "rdma.link"]);
    assert!(named["profile_selection"].is_null());
    let table = stdout(&run(&host("roce-mtu-1500"), &["--profile", "auto"]));
    assert!(
        table.contains("profile auto → roce-400g: host shows 8× H100"),
        "{table}"
    );
}

#[test]
fn auto_profile_without_a_fit_falls_back_to_generic_with_a_note() {
    let root = tree(&[("proc/sys/kernel/hostname", "cpu-node\n")]);
    std::fs::create_dir_all(root.path().join("sys/bus/pci/devices")).unwrap();
    let (_, report) = run_json(root.path(), "auto", &["--only", "rdma.link"]);
    assert_eq!(report["profile"], "generic");
    let note = report["profile_selection"]["note"].as_str().unwrap();
    assert!(note.contains("fell back to `generic`"), "{note}");
}

#[test]
fn completions_and_manual_come_from_the_parser() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = preflight().args(["completions", shell]).output().unwrap();
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains("fabric-preflight")
                && text.contains("profile")
                && text.contains("snapshot"),
            "{shell}"
        );
        assert!(
            !text.contains("__probe"),
            "{shell}: the internal subcommand leaks"
        );
    }
    // The bash script loads in a real bash and completes a subcommand.
    let script = tempfile::NamedTempFile::new().unwrap();
    let bash = preflight().args(["completions", "bash"]).output().unwrap();
    std::fs::write(script.path(), &bash.stdout).unwrap();
    let completed = std::process::Command::new("bash")
        .arg("-c")
        .arg(
            r#"source "$1" && COMP_WORDS=(fabric-preflight comp) COMP_CWORD=1 \
               && _fabric__preflight fabric-preflight comp fabric-preflight && echo "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(script.path())
        .output()
        .unwrap();
    assert_eq!(
        stdout(&completed).trim(),
        "completions",
        "{}",
        stderr(&completed)
    );
    let man = preflight().arg("man").output().unwrap();
    let page = stdout(&man);
    assert!(page.contains(".TH fabric-preflight 1"), "{page}");
    assert!(
        page.contains("completions") && page.contains("snapshot"),
        "{page}"
    );
    let bad = preflight().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(code(&bad), Exit::USAGE);
}

#[test]
fn version_names_the_commit() {
    let out = preflight().arg("--version").output().unwrap();
    let text = stdout(&out);
    let commit = fabric_preflight::build_info::COMMIT;
    assert_eq!(
        text.trim_end(),
        format!("fabric-preflight {}", fabric_preflight::build_info::VERSION)
    );
    assert!(text.contains(commit), "{text}");
    let in_git = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".git")
        .exists();
    if in_git
        && std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_ok()
    {
        assert!(
            commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{commit}"
        );
    }
}

#[test]
fn output_files_are_replaced_whole_by_rename() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fabric_preflight.prom");
    std::fs::write(&path, "old\n").unwrap();
    let before = std::fs::metadata(&path).unwrap().ino();
    let spec = format!("prometheus={}", path.display());
    let out = run(
        &host("hgx-healthy"),
        &["--only", "rdma.link", "--output", &spec],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // A new inode: the collector, mid-read of the old file, never sees a half-written one.
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), before);
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("fabric_preflight_info{"));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["fabric_preflight.prom"]);
}

#[test]
fn views_fit_the_terminal_width() {
    let nccl_log = testdata("nccl/mixed-socket-one-bad-node.log");
    let hgx = host("hgx-healthy");
    let views: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["topo".into(), "--root".into(), hgx.clone().into()],
        vec!["explain".into(), "gdr.kernel_path".into()],
        vec!["profiles".into()],
        vec!["list".into()],
        vec!["nccl".into(), nccl_log.into()],
    ];
    for columns in [60, 100] {
        for args in &views {
            let out = preflight()
                .env("COLUMNS", columns.to_string())
                .args(args)
                .output()
                .unwrap();
            let text = stdout(&out);
            assert!(!text.is_empty(), "{args:?}: {}", stderr(&out));
            for line in text.lines() {
                assert!(
                    line.chars().count() <= columns,
                    "{args:?} at {columns} columns: {} chars: {line}\n{text}",
                    line.chars().count()
                );
            }
        }
    }
}

/// Runs `args` with stderr on a pseudo-terminal (stdout stays a pipe) and returns what the terminal got.
fn stderr_on_a_terminal(args: &[&str]) -> String {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors we then own; no name, termios or size given.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here only.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let out = preflight()
        .args(args)
        .stderr(std::process::Stdio::from(slave))
        .output()
        .unwrap();
    assert!(matches!(code(&out), 0 | 1 | 3), "{}", stdout(&out));
    let mut seen = Vec::new();
    // The child has exited and the slave is closed: read until EIO.
    let _ = std::fs::File::from(master).read_to_end(&mut seen);
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn progress_line_names_the_active_check_on_a_terminal_only() {
    let root = host("h200-gds");
    let root = root.to_str().unwrap();
    let args = [
        "run", "--root", root, "--only", "gds.read", "--format", "json",
    ];
    let shown = stderr_on_a_terminal(&args);
    assert!(
        shown.contains("running gds.read (active check 1 of 1)…"),
        "{shown:?}"
    );
    // Erased before the report: the line ends with carriage return and erase-line.
    assert!(shown.ends_with("\r\x1b[2K"), "{shown:?}");
    let quiet: Vec<&str> = args.iter().copied().chain(["--quiet"]).collect();
    assert_eq!(stderr_on_a_terminal(&quiet), "");
    // Not a terminal: nothing.
    let piped = preflight().args(args).output().unwrap();
    assert_eq!(stderr(&piped), "");
}

#[test]
fn a_report_file_that_cannot_be_renamed_over_is_written_in_place() {
    use std::os::unix::fs::PermissionsExt;
    // A writable file in a directory this user may not write (as a file bind-mounted into a pod would be):
    // no temporary can sit beside it, so it is written in place rather than lost.
    let (mut cmd, _bin) = crate::robustness::unprivileged()
        .expect("root without setpriv (util-linux): cannot test as an unprivileged user");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    std::fs::write(&path, "old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = cmd
        .args([
            "run",
            "--only",
            "rdma.memlock",
            "--color",
            "never",
            "--output",
        ])
        .arg(format!("json={}", path.display()))
        .output()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(matches!(code(&out), 0 | 1), "{}", stderr(&out));
    json(Schema::Run, &std::fs::read(&path).unwrap());
}

/// What the real H200 printed in this session's recording (`bench/h200-session.sh`) keeps to the schemas: the
/// run reports of the generic, auto and node-type profiles, `topo` and `nccl` on that machine.
#[test]
fn the_h200_recording_matches_the_schemas() {
    for session in [
        "session-2026-12-01",
        "session-2026-12-01-final",
        "session-2026-12-01-s3",
        "session-2026-12-01-s4",
    ] {
        let dir = testdata(&format!("device/h200/{session}"));
        for (file, schema) in [
            ("run-generic.json", Schema::Run),
            ("run-hgx-h200-ib.json", Schema::Run),
            ("fleet/run-auto.json", Schema::Run),
            ("fleet/run-auto-strict.json", Schema::Run),
            ("topo.json", Schema::Topo),
            ("fleet/topo.json", Schema::Topo),
            ("nccl-h200-1rank.json", Schema::Nccl),
            ("pair-listen.json", Schema::Run),
        ] {
            let bytes = std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            json(schema, &bytes);
        }
    }
    // The last check with the final binary: the run reports only.
    let dir = testdata("device/h200/session-2026-12-01-s5");
    for file in ["run-generic.json", "run-hgx-h200-ib.json"] {
        json(Schema::Run, &std::fs::read(dir.join(file)).unwrap());
    }
}
