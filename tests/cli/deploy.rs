//! Fleet delivery: `--format npd` (Node Problem Detector's plugin protocol) and the Kubernetes manifests under
//! deploy/kubernetes/ (what kubernetes-validate does not check: volume names, image names).

use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;
use serde_yaml::Value;

use crate::util::*;

fn run_npd(scenario: &str, extra: &[&str]) -> (u8, String) {
    let out = preflight()
        .args(["run", "--format", "npd", "--root"])
        .arg(host(scenario))
        .args(extra)
        .output()
        .expect("binary runs");
    (code(&out), stdout(&out))
}

#[test]
fn npd_failure_is_non_ok_and_names_the_first_failing_check() {
    let (code, text) = run_npd("ib-port-down", &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.starts_with("FAIL rdma.link mlx5_3/1 (+"), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
}

// A healthy node under NPD (exit 0, one line): the golden outputs of h200-vm-snapshot
// (tests/golden/h200-vm-snapshot/npd.txt and exit-codes.txt).

#[test]
fn npd_check_that_could_not_run_is_unknown() {
    // The recording has no NVML answers: gpu.inventory cannot run, nothing fails.
    let (code, text) = run_npd("h200-gds", &[]);
    assert_eq!(code, 2, "{text}");
    assert!(text.starts_with("ERROR "), "{text}");
}

#[test]
fn npd_strict_warning_is_non_ok() {
    let (code, text) = run_npd("h200-vm-snapshot", &["--strict"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.starts_with("WARN gds.kernel_path"), "{text}");
}

fn manifests() -> Vec<(PathBuf, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let value =
                    Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                docs.push((path.clone(), value));
            }
        }
    }
    assert!(docs.len() >= 3, "manifests found: {}", docs.len());
    docs
}

/// Every pod spec in a document (anything holding `containers`).
fn pod_specs<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Mapping(map) => {
            if map.contains_key("containers") {
                out.push(value);
            }
            map.values().for_each(|v| pod_specs(v, out));
        }
        Value::Sequence(items) => items.iter().for_each(|v| pod_specs(v, out)),
        _ => {}
    }
}

fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers"]
        .into_iter()
        .filter_map(|key| spec[key].as_sequence())
        .flatten()
}

#[test]
fn manifests_mount_only_defined_volumes() {
    for (path, doc) in manifests() {
        let mut specs = Vec::new();
        pod_specs(&doc, &mut specs);
        for spec in specs {
            let defined: Vec<&str> = spec["volumes"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|v| v["name"].as_str())
                .collect();
            for c in containers(spec) {
                for mount in c["volumeMounts"].as_sequence().into_iter().flatten() {
                    let name = mount["name"].as_str().unwrap_or_default();
                    assert!(
                        defined.contains(&name),
                        "{}: container {:?} mounts volume {name:?}, defined: {defined:?}",
                        path.display(),
                        c["name"]
                    );
                }
            }
        }
    }
}

/// The reference grammar of distribution/reference (what `docker pull` and containerd accept), with a tag or a
/// digest required: an untagged name silently means `:latest`.
fn is_image_reference(image: &str) -> bool {
    let domain = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?";
    let component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
    let tag = r"[\w][\w.-]{0,127}";
    let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    let grammar = Regex::new(&format!(
        r"^(?:({domain})/)?{component}(?:/{component})*(?::{tag}(?:@{digest})?|@{digest})$"
    ))
    .unwrap();
    let Some(captures) = grammar.captures(image) else {
        return false;
    };
    // A first part without a dot or port is a path component on Docker Hub, and then must be lower case.
    let hub_path = captures.get(1).is_some_and(|d| {
        let d = d.as_str();
        !d.contains(['.', ':']) && d != "localhost"
    });
    let name_len = image.split([':', '@']).next().unwrap_or_default().len();
    name_len <= 255 && !(hub_path && captures[1].chars().any(|c| c.is_ascii_uppercase()))
}

#[test]
fn image_reference_grammar_accepts_and_rejects_what_registries_do() {
    for good in [
        "registry.example.com/fabric-preflight:0.1.0",
        "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.20",
        "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        "localhost:5000/a/b__c:latest",
        "ubuntu@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        assert!(is_image_reference(good), "{good}");
    }
    for bad in [
        "<your image with the binary>",
        "registry.example.com/fabric-preflight",
        "Fabric-Preflight:1",
        "Hub/fabric:1",
        "registry.example.com/fabric-preflight:",
        "registry.example.com//x:1",
        "x:-bad",
        "",
    ] {
        assert!(!is_image_reference(bad), "{bad}");
    }
}

#[test]
fn manifests_name_real_images_and_the_current_release() {
    for (path, doc) in manifests() {
        let mut specs = Vec::new();
        pod_specs(&doc, &mut specs);
        for c in specs.into_iter().flat_map(containers) {
            let image = c["image"].as_str().unwrap_or_default();
            assert!(is_image_reference(image), "{}: {image:?}", path.display());
            if let Some(tag) = image.strip_prefix("registry.example.com/fabric-preflight:") {
                assert_eq!(tag, env!("CARGO_PKG_VERSION"), "{}", path.display());
            }
        }
    }
}

#[test]
fn npd_plugin_config_is_json_that_runs_the_npd_format() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/node-problem-detector.yaml"),
    )
    .unwrap();
    let config_map: Value = serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "ConfigMap")
        .unwrap();
    let plugin: serde_json::Value = serde_json::from_str(
        config_map["data"]["fabric-preflight.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(plugin["plugin"], "custom");
    let args: Vec<&str> = plugin["rules"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--format=npd"), "{args:?}");
    // The plugin's exact command line is accepted (no usage error, exit 2) and judges a recorded failure.
    let out = preflight()
        .args(&args)
        .arg("--root")
        .arg(host("ib-port-down"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).starts_with("FAIL rdma.link"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn manifests_only_name_existing_checks() {
    let only = Regex::new(r"--only=([a-z0-9_.,]+)").unwrap();
    let mut lists = 0;
    for (path, doc) in manifests() {
        let text = serde_yaml::to_string(&doc).unwrap();
        for ids in only.captures_iter(&text) {
            let out = preflight()
                .args(["run", "--format", "json", "--only", &ids[1], "--root"])
                .arg(host("hgx-healthy"))
                .output()
                .unwrap();
            assert_ne!(
                code(&out),
                Exit::USAGE,
                "{}: {}",
                path.display(),
                stderr(&out)
            );
            lists += 1;
        }
    }
    assert!(
        lists >= 2,
        "the DaemonSet and the NPD plugin each pick their checks"
    );
}

/// Issue 29, deployments: every pod runs under the runtime's seccomp profile; every container drops all
/// capabilities and adds back only what its checks need (IPC_LOCK to register memory; SYS_ADMIN only in the
/// one-shot init container that judges pcie.acs, never in a long-running DaemonSet such as NPD's), cannot
/// gain privileges, has a read-only root filesystem and resource requests and limits; images are pinned
/// (never `:latest`); the host's /sys is mounted read-only, recursively where the cluster can.
#[test]
fn every_container_runs_with_the_least_it_needs() {
    let allowed_caps = |kind: &str, name: &str| -> &'static [&'static str] {
        match (kind, name) {
            ("Deployment", "fabric-preflight") => &["IPC_LOCK", "SYS_ADMIN"],
            ("Job", "pair" | "collective") => &["IPC_LOCK"],
            _ => &[],
        }
    };
    let mut checked = 0;
    for (path, doc) in manifests() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let mut specs = Vec::new();
        pod_specs(&doc, &mut specs);
        for spec in specs {
            let at = |what: &str| format!("{} ({kind}): {what}", path.display());
            assert_eq!(
                spec["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault",
                "{}",
                at("pod seccompProfile")
            );
            for c in containers(spec) {
                let name = c["name"].as_str().unwrap();
                let at = |what: &str| at(&format!("container {name}: {what}"));
                let security = &c["securityContext"];
                assert_eq!(
                    security["allowPrivilegeEscalation"],
                    Value::Bool(false),
                    "{}",
                    at("allowPrivilegeEscalation")
                );
                assert_eq!(
                    security["readOnlyRootFilesystem"],
                    Value::Bool(true),
                    "{}",
                    at("readOnlyRootFilesystem")
                );
                let caps = |key: &str| -> Vec<&str> {
                    security["capabilities"][key]
                        .as_sequence()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect()
                };
                assert_eq!(caps("drop"), ["ALL"], "{}", at("capabilities.drop"));
                for cap in caps("add") {
                    assert!(
                        allowed_caps(&kind, name).contains(&cap),
                        "{}",
                        at(&format!("adds {cap}"))
                    );
                }
                for key in ["requests", "limits"] {
                    for resource in ["cpu", "memory"] {
                        assert!(
                            !c["resources"][key][resource].is_null(),
                            "{}",
                            at(&format!("resources.{key}.{resource}"))
                        );
                    }
                }
                let image = c["image"].as_str().unwrap_or_default();
                assert!(!image.ends_with(":latest"), "{}", at(image));
                for mount in c["volumeMounts"].as_sequence().into_iter().flatten() {
                    if mount["mountPath"] == "/sys" {
                        assert_eq!(mount["readOnly"], Value::Bool(true), "{}", at("/sys"));
                        assert_eq!(mount["recursiveReadOnly"], "IfPossible", "{}", at("/sys"));
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 8, "containers checked: {checked}");
}

/// Issue 29, deployments: a pod that listens (the pair ring's control port, the collective's rendezvous and
/// NCCL's bootstrap) is reachable only from the pods of its own job.
#[test]
fn listening_pods_admit_only_their_own_job() {
    let docs = manifests();
    let mut listeners = 0;
    for (path, doc) in &docs {
        if doc["kind"] != "Job" {
            continue;
        }
        let job = doc["metadata"]["name"].as_str().unwrap();
        let ports: Vec<&Value> = doc["spec"]["template"]["spec"]["containers"]
            .as_sequence()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_sequence().into_iter().flatten())
            .collect();
        if ports.is_empty() {
            continue;
        }
        listeners += 1;
        // A Job's pods carry `job-name: <job>` from the Job controller, whatever the template says.
        let selector = serde_yaml::from_str::<Value>(&format!("{{job-name: {job}}}")).unwrap();
        let policy = docs
            .iter()
            .map(|(_, d)| d)
            .find(|d| {
                d["kind"] == "NetworkPolicy" && d["spec"]["podSelector"]["matchLabels"] == selector
            })
            .unwrap_or_else(|| panic!("{}: no NetworkPolicy selects job {job}", path.display()));
        let rules = policy["spec"]["ingress"].as_sequence().unwrap();
        assert!(!rules.is_empty(), "{}: {job}", path.display());
        for rule in rules {
            let from = rule["from"].as_sequence().unwrap();
            assert!(
                from.iter()
                    .all(|peer| peer["podSelector"]["matchLabels"] == selector
                        && peer["namespaceSelector"].is_null()
                        && peer["ipBlock"].is_null()),
                "{}: {job} admits {from:?}",
                path.display()
            );
        }
    }
    assert!(listeners >= 2, "Jobs with a listening port: {listeners}");
}
