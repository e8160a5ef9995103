//! Shared helpers for the Gemma 3 tests: fixture paths, reference.json, loading and comparing.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use df11_llm::testing::{
    comparable_greedy, fixtures, floats, ids, input, input_on, model_dir, reference, test_device,
};

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use df11_llm::{load, LoadOptions, Loaded, ModelSource};
use gemma3_df11::{Gemma3, Gemma3Arch};

/// The Gemma 3 fixture: a tiny `Gemma3ForConditionalGeneration` (transformers 4.51 layout), only
/// the language model's layers compressed.
pub const NAME: &str = "gemma3-tiny";

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
