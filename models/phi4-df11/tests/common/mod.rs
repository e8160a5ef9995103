//! Shared helpers for the Phi-4 tests: fixture paths, reference.json, loading and comparing.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use df11_llm::CausalLm;
use df11_llm::{load, LoadOptions, Loaded, ModelSource};
use phi4_df11::{Phi4, Phi4Arch};
use serde_json::Value;

/// The Phi-4 fixture: fused `qkv_proj` / `gate_up_proj`, untied; `lm_head`, `embed_tokens`
/// and the layers compressed.
pub const MODELS: [&str; 1] = ["phi4-tiny"];

/// The fixture the single-model tests use.
pub const MODEL: &str = MODELS[0];

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

/// Loads a fixture folder on the CPU.
pub fn load_dir(dir: &Path, bf16: bool, dtype: DType) -> Loaded<Phi4> {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype,
        show_progress: false,
    };
    match load::<Phi4Arch>(&opts) {
        Ok(l) => l,
        Err(e) => panic!("loading {}: {e}", dir.display()),
    }
}

/// Loads fixture `name`, DF11 (`kind` = `df11`) or BF16 (`bf16`).
pub fn load_fixture(name: &str, kind: &str, dtype: DType) -> Loaded<Phi4> {
    load_dir(&model_dir(name, kind), kind == "bf16", dtype)
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

/// Reference positions (index, argmax) whose recorded top-1/top-2 margin is at least
/// `min_margin`.
pub fn comparable_argmax(reference: &Value, min_margin: f64) -> Vec<(usize, u32)> {
    let argmax = ids(&reference["argmax_per_position"]);
    let margins = floats(&reference["margin_per_position"]);
    assert_eq!(argmax.len(), margins.len());
    argmax
        .into_iter()
        .zip(margins)
        .enumerate()
        .filter(|(_, (_, m))| *m >= min_margin)
        .map(|(i, (a, _))| (i, a))
        .collect()
}

/// Argmax of the logits of every prompt position, fed one token at a time through the KV cache.
pub fn argmax_per_position<M: CausalLm>(model: &mut M, prompt: &[u32]) -> Vec<u32> {
    model.reset();
    prompt
        .iter()
        .enumerate()
        .map(|(pos, &t)| {
            let logits = model.forward(&input(&[t]), pos).unwrap();
            logits
                .squeeze(0)
                .unwrap()
                .argmax(0)
                .unwrap()
                .to_scalar::<u32>()
                .unwrap()
        })
        .collect()
}
