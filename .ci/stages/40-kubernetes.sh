#!/usr/bin/env bash
# deploy/kubernetes/*.yaml against the Kubernetes API schema with kubernetes-validate --strict (pinned validator,
# pinned Kubernetes version). What the schema cannot check (volumeMounts naming defined volumes, image names,
# the NPD plugin's command line) is tested by tests/cli/deploy.rs in `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
kubernetes_version=1.30.0
venv_install kubernetes-validate==1.37.0
kubernetes-validate --strict --quiet --kubernetes-version "$kubernetes_version" deploy/kubernetes/*.yaml

# The validator must be able to fail here: an unknown field in a copy is rejected.
broken=$(mktemp --suffix=.yaml)
trap 'rm -f "$broken"' EXIT
sed 's/^\( *\)terminationMessagePolicy:/\1terminationMessagePolicyy:/' deploy/kubernetes/init-container-deployment.yaml > "$broken"
if kubernetes-validate --strict --quiet --kubernetes-version "$kubernetes_version" "$broken" >/dev/null 2>&1; then
  echo "FAIL: kubernetes-validate --strict accepted an unknown field: it is not checking" >&2
  exit 1
fi
manifests=(deploy/kubernetes/*.yaml)
echo "${#manifests[@]} manifests valid for Kubernetes $kubernetes_version (--strict); a misspelt field is rejected"
