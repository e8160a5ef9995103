//! Shared helpers for the Mistral tests: fixture paths, reference.json, loading and comparing.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use df11_llm::testing::{
    comparable_greedy, fixtures, floats, ids, input, input_on, model_dir, reference, test_device,
};

use std::path::Path;

use candle_core::{DType, Device};
use df11_llm::CausalLm;
use df11_llm::{load, LoadOptions, Loaded, ModelSource};
use mistral_nemo_df11::{Mistral, MistralArch};
use serde_json::Value;

/// The Mistral-Nemo fixture: head_dim 48 ≠ hidden / heads (40), untied; `lm_head`,
/// `embed_tokens` and the layers compressed (escaped-dot `pattern_dict` keys).
pub const MODELS: [&str; 1] = ["mistral-nemo-tiny"];

/// The fixture the single-model tests use.
pub const MODEL: &str = MODELS[0];

/// Loads a fixture folder on the CPU.
pub fn load_dir(dir: &Path, bf16: bool, dtype: DType) -> Loaded<Mistral> {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype,
        show_progress: false,
    };
    match load::<MistralArch>(&opts) {
        Ok(l) => l,
        Err(e) => panic!("loading {}: {e}", dir.display()),
    }
}

/// Loads fixture `name`, DF11 (`kind` = `df11`) or BF16 (`bf16`).
pub fn load_fixture(name: &str, kind: &str, dtype: DType) -> Loaded<Mistral> {
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

/// A copy of the DF11 fixture with `edit` applied to its config.json.
pub fn with_config(edit: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = model_dir(MODEL, "df11");
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    tmp
}
