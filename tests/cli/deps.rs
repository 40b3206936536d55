//! `.ci/deps` finds libclang the way bindgen does (clang-sys's runtime search), not by any `libclang*` file:
//! a fresh Debian 12 with only libclang-cpp.so.14 must still get libclang1-14 installed.

use std::fs;
use std::path::Path;
use std::process::Command;

/// A file clang-sys accepts: 64-bit ELF, and bindgen's first call among its symbols.
const LIBCLANG: &[u8] = b"\x7fELF\x02\x01\x01\0....clang_createIndex\0";
/// libclang-cpp: the C++ library, which bindgen cannot load.
const LIBCLANG_CPP: &[u8] = b"\x7fELF\x02\x01\x01\0....clang::tooling\0";

/// `DEPS_ROOT=<tree> .ci/deps --dry-run` on a tree holding `files`: the packages it would install.
fn would_install(files: &[(&str, &[u8])]) -> Vec<String> {
    would_install_with(files, None)
}

/// The same, with `LIBCLANG_PATH` set to `libclang_path` inside the tree.
fn would_install_with(files: &[(&str, &[u8])], libclang_path: Option<&str>) -> Vec<String> {
    let tree = tempfile::tempdir().unwrap();
    for (path, bytes) in files {
        let path = tree.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }
    let mut cmd = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/deps"));
    cmd.arg("--dry-run")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DEPS_ROOT", tree.path());
    if let Some(rel) = libclang_path {
        cmd.env("LIBCLANG_PATH", tree.path().join(rel));
    }
    let out = cmd.output().expect(".ci/deps runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

const HEADERS: (&str, &[u8]) = ("usr/lib/llvm-14/lib/clang/14.0.6/include/stddef.h", b"");

#[test]
fn deps_libclang_cpp_alone_is_not_libclang() {
    let need = would_install(&[
        ("usr/lib/x86_64-linux-gnu/libclang-cpp.so.14", LIBCLANG_CPP),
        ("usr/lib/llvm-14/lib/libclang-cpp.so.1", LIBCLANG_CPP),
        HEADERS,
    ]);
    assert_eq!(need, ["libclang1-14"]);
}

#[test]
fn deps_debian_libclang1_is_found() {
    for name in [
        "usr/lib/x86_64-linux-gnu/libclang-14.so.1",
        "usr/lib/llvm-14/lib/libclang.so.1",
        "usr/lib/libclang.so",
    ] {
        assert!(
            would_install(&[(name, LIBCLANG), HEADERS]).is_empty(),
            "{name}"
        );
    }
}

#[test]
fn deps_32_bit_or_non_elf_libclang_does_not_count() {
    let elf32 = b"\x7fELF\x01\x01\x01\0clang_createIndex\0";
    for bytes in [&elf32[..], b"INPUT(libclang.so.1)\n"] {
        let need = would_install(&[("usr/lib/libclang.so", bytes), HEADERS]);
        assert_eq!(need, ["libclang1-14"]);
    }
}

#[test]
fn deps_libclang_without_its_headers_installs_them() {
    let need = would_install(&[("usr/lib/llvm-14/lib/libclang.so.1", LIBCLANG)]);
    assert_eq!(need, ["libclang-common-14-dev"]);
}

#[test]
fn deps_libclang_path_is_the_only_place_searched_when_set() {
    let files = [
        ("usr/lib/llvm-14/lib/libclang.so.1", LIBCLANG),
        ("opt/llvm/lib/libclang-cpp.so.17", LIBCLANG_CPP),
        HEADERS,
    ];
    assert_eq!(
        would_install_with(&files, Some("opt/llvm/lib")),
        ["libclang1-14"]
    );
    assert!(would_install_with(&files, Some("usr/lib/llvm-14/lib/libclang.so.1")).is_empty());
}
