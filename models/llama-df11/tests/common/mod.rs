//! Shared helpers for the Llama tests: fixture paths, reference.json, loading and comparing.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use df11_llm::testing::{
    comparable_greedy, fixtures, floats, ids, input, input_on, model_dir, reference, test_device,
};

use std::path::Path;

use candle_core::{DType, Device};
use df11_llm::{load, LoadOptions, Loaded, ModelSource};
use serde_json::Value;

/// The architecture under test.
pub type Arch = llama_df11::LlamaArch;
/// Its model.
pub type Model = llama_df11::Llama;
/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_llama-df11");
/// The fixtures of this architecture (untied; llama3 RoPE scaling; escaped-dot pattern keys).
pub const MODELS: [&str; 1] = ["llama-tiny"];
/// Fixtures of other architectures, with their `architectures` entry.
pub const OTHERS: [(&str, &str); 2] = [
    ("qwen2-tiny", "Qwen2ForCausalLM"),
    ("mistral-nemo-tiny", "MistralForCausalLM"),
];

/// Options to load `dir` on the CPU.
pub fn options(dir: &Path, bf16: bool, dtype: DType) -> LoadOptions {
    LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype,
        show_progress: false,
    }
}

/// Loads fixture `name`, DF11 (`kind` = `df11`) or BF16 (`bf16`), on the CPU.
pub fn load_fixture(name: &str, kind: &str, dtype: DType) -> Loaded<Model> {
    let dir = model_dir(name, kind);
    load::<Arch>(&options(&dir, kind == "bf16", dtype))
        .unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()))
}

/// `|got - want| <= 1e-4 + 1e-4 |want|` for every logit.
pub fn assert_logits_close(name: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name}: vocabulary size");
    let mut worst = (0.0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        let tol = 1e-4 + 1e-4 * w.abs();
        assert!(
            err <= tol,
            "{name}: logit {i}: got {g}, reference {w} (|diff| {err:e} > {tol:e})"
        );
        if err > worst.0 {
            worst = (err, i);
        }
    }
    eprintln!("{name}: max |diff| {:e} at {}", worst.0, worst.1);
}

/// A folder shaped like a legacy DFloat11 0.1.0 repo: a config of only `dfloat11_version` and
/// a pickled layer.
pub fn legacy_repo() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("config.json"),
        r#"{"dfloat11_version": "0.1.0"}"#,
    )
    .unwrap();
    std::fs::write(tmp.path().join("layer_0.pkl"), b"\x80\x04\x95 pickle").unwrap();
    tmp
}

/// A copy of folder `src` whose config.json is changed by `edit`.
pub fn copy_with_config(src: &Path, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    tmp
}
