//! Shared helpers for the Gemma 3 tests: fixture paths, reference.json, loading and comparing.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use df11_llm::{load, LoadOptions, Loaded, ModelSource};
use gemma3_df11::{Gemma3, Gemma3Arch};
use serde_json::Value;

/// The Gemma 3 fixture: a tiny `Gemma3ForConditionalGeneration` (transformers 4.51 layout), only
/// the language model's layers compressed.
pub const NAME: &str = "gemma3-tiny";

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

/// Loads a model folder on the CPU.
pub fn load_dir(dir: &Path, bf16: bool, dtype: DType) -> Loaded<Gemma3> {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype,
        show_progress: false,
    };
    match load::<Gemma3Arch>(&opts) {
        Ok(l) => l,
        Err(e) => panic!("loading {}: {e}", dir.display()),
    }
}

/// Loads the fixture, DF11 (`kind` = `df11`) or BF16 (`bf16`).
pub fn load_fixture(kind: &str, dtype: DType) -> Loaded<Gemma3> {
    load_dir(&model_dir(NAME, kind), kind == "bf16", dtype)
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

/// Logits `[1, vocab]` → f32 values.
pub fn values(logits: &Tensor) -> Vec<f32> {
    logits
        .squeeze(0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

/// `|got - want| <= 1e-4 + 1e-4 |want|` for every logit; returns the largest difference.
pub fn assert_logits_close(what: &str, got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: vocabulary size");
    let mut worst = (0.0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        let tol = 1e-4 + 1e-4 * w.abs();
        assert!(
            err <= tol,
            "{what}: logit {i}: got {g}, reference {w} (|diff| {err:e} > {tol:e})"
        );
        if err > worst.0 {
            worst = (err, i);
        }
    }
    eprintln!("{what}: max |diff| {:e} at {}", worst.0, worst.1);
    worst.0
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
