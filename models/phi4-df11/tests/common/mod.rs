//! Shared helpers for the Phi-4 tests: fixture paths, reference.json, loading and comparing.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use df11_llm::testing::{
    comparable_greedy, fixtures, floats, ids, input, input_on, model_dir, reference, test_device,
};

use std::path::Path;

use candle_core::{DType, Device};
use df11_llm::CausalLm;
use df11_llm::{load, LoadOptions, Loaded, ModelSource};
use phi4_df11::{Phi4, Phi4Arch};
use serde_json::Value;

/// The Phi-4 fixture: fused `qkv_proj` / `gate_up_proj`, untied; `lm_head`, `embed_tokens`
/// and the layers compressed.
pub const MODELS: [&str; 1] = ["phi4-tiny"];

/// The fixture the single-model tests use.
pub const MODEL: &str = MODELS[0];

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
