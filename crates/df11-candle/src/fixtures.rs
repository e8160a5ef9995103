//! Where the workspace's test fixtures are: `tests/fixtures`, used by this crate's tests and
//! by `df11_llm::testing` (not part of the library's API).

use std::path::{Path, PathBuf};

/// `tests/fixtures` of the workspace: `../../tests/fixtures` from the working directory where
/// it is there (a test runs in its crate's folder, and every crate of the workspace is two
/// folders down: so test binaries carried to another machine and run from their crate's folder
/// find the fixtures of that checkout), else from the crate's folder as compiled. Panics when
/// the folder is missing: a test must not pass without data.
pub fn fixtures() -> PathBuf {
    let relative = Path::new("../../tests/fixtures");
    let here = std::env::current_dir().ok().map(|d| d.join(relative));
    let dir = here
        .filter(|d| d.join("models").is_dir())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(relative));
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
