//! Helpers for the model crates' tests.

use std::path::PathBuf;

/// The path of binary `name` for an end-to-end test: `$DF11_BIN_DIR/<name>` when that variable is
/// set (test binaries carried to another machine, e.g. the GPU suite, with the model binaries
/// beside them), else `built`, the path cargo compiled in (`env!("CARGO_BIN_EXE_<name>")`).
pub fn binary(name: &str, built: &str) -> PathBuf {
    match std::env::var_os("DF11_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => PathBuf::from(built),
    }
}
