//! Shared helpers for the Qwen3 tests: fixture paths, reference.json, loading and comparing.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use df11_llm::testing::{
    comparable_greedy, fixtures, floats, ids, input, input_on, model_dir, reference, test_device,
};

use std::path::Path;

use candle_core::{DType, Device};
use df11_llm::{load, LoadOptions, Loaded, ModelSource};
use qwen3_df11::{Qwen3, Qwen3Arch};

/// The two Qwen3 fixtures: untied (lm_head, embed_tokens and layers compressed) and tied
/// (layers only).
pub const MODELS: [&str; 2] = ["qwen3-tiny", "qwen3-tied-tiny"];

/// Loads a fixture folder on the CPU.
pub fn load_dir(dir: &Path, bf16: bool, dtype: DType) -> Loaded<Qwen3> {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype,
        show_progress: false,
    };
    match load::<Qwen3Arch>(&opts) {
        Ok(l) => l,
        Err(e) => panic!("loading {}: {e}", dir.display()),
    }
}

/// Loads fixture `name`, DF11 (`kind` = `df11`) or BF16 (`bf16`).
pub fn load_fixture(name: &str, kind: &str, dtype: DType) -> Loaded<Qwen3> {
    load_dir(&model_dir(name, kind), kind == "bf16", dtype)
}
