//! `fabric-preflight isolate`: the real binary over 8 stand-in nodes, each group's job the real `collective`
//! over the stand-in launcher and all_reduce_perf (tests/isolate/job); one node falls back to NET/Socket.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use super::util::*;

fn isolate(dir: &Path, env: &[(&str, &str)], extra: &[&str]) -> (Output, Value) {
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/isolate/job");
    let mut cmd = preflight();
    cmd.current_dir(dir)
        .env("FABRIC_PREFLIGHT", bin())
        .env("ISOLATE_LOG", dir.join("jobs.log"))
        .args([
            "isolate",
            "--nodes",
            "n[1-8]",
            "--work-dir",
            "work",
            "--format",
            "json",
        ])
        .args([
            "--output",
            "junit=r.xml",
            "--output",
            "html=r.html",
            "--output",
            "culprits=c.txt",
        ])
        .args(extra)
        .arg("--")
        .arg(job)
        .args(["{nodes}", "{report}"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("binary runs");
    let report = json_out(Schema::Isolate, &out);
    assert_eq!(report["exit_code"], u64::from(code(&out)), "{report:#}");
    (out, report)
}

#[test]
fn isolate_names_the_one_bad_node_and_only_it() {
    let dir = tempfile::tempdir().unwrap();
    let (out, report) = isolate(dir.path(), &[("ISOLATE_BAD", "n5")], &[]);
    assert_eq!(code(&out), Exit::CHECK_FAILED, "{report:#}");
    assert_eq!(
        report["summary"]["culprit_nodes"],
        serde_json::json!(["n5"])
    );
    for node in report["nodes"].as_array().unwrap() {
        let want = if node["name"] == "n5" {
            "culprit_node"
        } else {
            "healthy"
        };
        assert_eq!(node["verdict"], want, "{node:#}");
    }
    let n5 = &report["nodes"][4];
    // The evidence names the confirming test, its busbw below the floor and the transport NCCL used.
    assert!(n5["reason"]
        .as_str()
        .unwrap()
        .contains("confirmed against a known-good node"));
    let confirm = n5["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["purpose"] == "confirm")
        .unwrap();
    assert_eq!(confirm["passed"], false);
    assert!(confirm["busbw_gbytes_per_sec"].as_f64().unwrap() < 331.0);
    assert!(
        confirm["transport"]
            .as_str()
            .unwrap()
            .contains("over socket"),
        "{confirm:#}"
    );
    // As many jobs ran as the report lists, within NVCRE-like bounds for 8 nodes.
    let jobs = std::fs::read_to_string(dir.path().join("jobs.log")).unwrap();
    assert_eq!(
        jobs.lines().count() as u64,
        report["summary"]["tests"].as_u64().unwrap()
    );
    assert!(
        report["summary"]["rounds"].as_u64().unwrap() <= 4,
        "{report:#}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("c.txt")).unwrap(),
        "n5\n"
    );
    assert_eq!(n5["code"], "ISO001", "{n5:#}");
    let junit = std::fs::read_to_string(dir.path().join("r.xml")).unwrap();
    assert_eq!(junit.matches("<failure").count(), 1);
    assert!(junit.contains("type=\"ISO001\""), "{junit}");
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    // Self-contained: the culprit's row is marked, and nothing is fetched from elsewhere.
    assert!(html.contains("<tr class=\"culprit_node\">"), "{html}");
    assert!(!html.contains("src=") && !html.contains("href="));
}

#[test]
fn isolate_of_a_healthy_fleet_passes_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let (out, report) = isolate(dir.path(), &[], &[]);
    assert_eq!(code(&out), Exit::OK, "{report:#}");
    assert!(report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["verdict"] == "healthy"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("c.txt")).unwrap(),
        ""
    );
}

#[test]
fn isolate_refuses_bad_input_before_running_anything() {
    let dir = tempfile::tempdir().unwrap();
    for (args, why) in [
        (
            vec!["--nodes", "n1", "--", "job", "{nodes}", "{report}"],
            "at least 2 nodes",
        ),
        (
            vec!["--nodes", "n1,n1", "--", "job", "{nodes}", "{report}"],
            "listed twice",
        ),
        (
            vec![
                "--nodes",
                "n1,n$(reboot)",
                "--",
                "job",
                "{nodes}",
                "{report}",
            ],
            "only letters",
        ),
        (
            vec!["--nodes", "n[1-4]", "--", "job", "{nodes}"],
            "{report}",
        ),
        (
            vec![
                "--nodes",
                "n[1-4]",
                "--topology",
                "/nonexistent",
                "--",
                "job",
                "{nodes}",
                "{report}",
            ],
            "--topology",
        ),
        (
            vec![
                "--nodes", "n[1-4]", "--output", "pdf=x", "--", "job", "{nodes}", "{report}",
            ],
            "unknown format",
        ),
    ] {
        let out = preflight()
            .current_dir(dir.path())
            .arg("isolate")
            .args(&args)
            .env_remove("SLURM_JOB_NODELIST")
            .output()
            .unwrap();
        assert_eq!(code(&out), Exit::USAGE, "{args:?}");
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
    }
}

/// deploy/slurm/isolate.sbatch under a stand-in `srun` (one step per group: `--nodelist` decides whether the
/// group holds the bad node) and a stand-in `scontrol` that logs its calls: only the culprit is drained, with
/// the report named in the reason.
#[test]
fn isolate_sbatch_drains_the_culprit_and_only_it() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let write = |name: &str, text: &str| {
        let path = bin_dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    };
    write(
        "srun",
        "#!/bin/sh\n# stand-in srun: --nodes and --nodelist pick the stand-in nodes; a group with $ISOLATE_BAD falls back to Socket\n\
         n=2; list=\nwhile [ $# -gt 0 ]; do case \"$1\" in --nodes=*) n=${1#--nodes=}; shift ;; --nodelist=*) list=${1#--nodelist=}; shift ;; -*) shift ;; *) break ;; esac; done\n\
         case \",$list,\" in *,\"$ISOLATE_BAD\",*) export STANDIN_SCENARIO=socket ;; *) export STANDIN_SCENARIO=healthy ;; esac\n\
         STANDIN_HOSTS=$list exec launch --label -N \"$n\" -n 2 \"$@\"\n",
    );
    write("scontrol", "#!/bin/sh\necho \"$@\" >>\"$SCONTROL_LOG\"\n");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/isolate.sbatch");
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/collective")
            .display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .arg(&script)
        .env_clear()
        .env("PATH", &path)
        .env("FABRIC_PREFLIGHT", bin())
        .env("SLURM_SUBMIT_DIR", dir.path())
        .env("SLURM_JOB_ID", "7")
        .env("SLURM_JOB_NODELIST", "gpu[01-06]")
        .env("ISOLATE_BAD", "gpu04")
        .env("SCONTROL_LOG", dir.path().join("scontrol.log"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED, "{}", stderr(&out));
    let report = json(
        Schema::Isolate,
        &std::fs::read(dir.path().join("isolate-7/isolate.json")).unwrap(),
    );
    assert_eq!(
        report["summary"]["culprit_nodes"],
        serde_json::json!(["gpu04"])
    );
    let drained = std::fs::read_to_string(dir.path().join("scontrol.log")).unwrap();
    let report_path = dir.path().join("isolate-7/isolate.json");
    assert_eq!(
        drained,
        format!(
            "update nodename=gpu04 state=drain reason=fabric-preflight isolate: culprit, see {}\n",
            report_path.display()
        )
    );
}
