//! Helpers for the model crates' tests: fixture paths, reference.json, inputs, the test device,
//! the binary under test. They panic on missing data: a test must not pass without it.

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use serde_json::Value;

/// The path of binary `name` for an end-to-end test: `$DF11_BIN_DIR/<name>` when that variable is
/// set (test binaries carried to another machine, e.g. the GPU suite, with the model binaries
/// beside them), else `built`, the path cargo compiled in (`env!("CARGO_BIN_EXE_<name>")`).
pub fn binary(name: &str, built: &str) -> PathBuf {
    match std::env::var_os("DF11_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => PathBuf::from(built),
    }
}

/// `tests/fixtures` of the workspace, resolved at run time from `CARGO_MANIFEST_DIR` (falling
/// back to the compile-time value). Panics when missing: a test must not pass without data.
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

/// The fixture's reference.json.
pub fn reference(name: &str) -> Value {
    let path = fixtures().join("models").join(name).join("reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("reference.json parses")
}

/// A JSON array of integers.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// A JSON array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// `[1, seq]` u32 ids on the CPU.
pub fn input(ids: &[u32]) -> Tensor {
    input_on(ids, &Device::Cpu)
}

/// `[1, seq]` u32 ids on `device`.
pub fn input_on(ids: &[u32], device: &Device) -> Tensor {
    Tensor::new(ids, device).unwrap().unsqueeze(0).unwrap()
}

/// The device of the device-level tests: CUDA device 0 when built with the `cuda` feature (the
/// GPU suite), else the CPU. With `cuda` on and no GPU this fails loudly.
pub fn test_device() -> Device {
    #[cfg(feature = "cuda")]
    {
        Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened")
    }
    #[cfg(not(feature = "cuda"))]
    {
        Device::Cpu
    }
}

/// The reference greedy tokens that can be compared: up to (excluding) the first step whose
/// recorded top-1/top-2 margin is below `min_margin`.
pub fn comparable_greedy(reference: &Value, min_margin: f64) -> Vec<u32> {
    let greedy = &reference["greedy"];
    let tokens = ids(&greedy["tokens"]);
    let margins = floats(&greedy["margins"]);
    assert_eq!(tokens.len(), margins.len());
    let n = margins
        .iter()
        .position(|m| *m < min_margin)
        .unwrap_or(tokens.len());
    tokens[..n].to_vec()
}
