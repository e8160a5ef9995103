//! Where the workspace's test fixtures are: `tests/fixtures`, used by this crate's tests and
//! by `df11_llm::testing` (not part of the library's API).

use std::path::PathBuf;

/// `tests/fixtures` of the workspace. Resolved at run time from `CARGO_MANIFEST_DIR` (so test
/// binaries carried to another machine find the fixtures next to the crate; every crate of
/// the workspace is two folders down), falling back to the compile-time value. Panics when the
/// folder is missing: a test must not pass without data.
pub fn fixtures() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let dir = PathBuf::from(manifest).join("../../tests/fixtures");
    assert!(
        dir.join("models").is_dir(),
        "fixtures not found at {}",
        dir.display()
    );
    dir
}

/// `tests/fixtures/models/<name>/<kind>` (kind: `bf16` or `df11`).
pub fn model_dir(name: &str, kind: &str) -> PathBuf {
    let d = fixtures().join("models").join(name).join(kind);
    assert!(d.is_dir(), "fixture folder missing: {}", d.display());
    d
}
