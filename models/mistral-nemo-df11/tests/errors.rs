//! Clear, typed errors for the usual mistakes: a missing folder, another architecture, the
//! wrong format, and configs this model does not run.

mod common;

use std::path::Path;

use candle_core::{DType, Device};
use common::*;
use df11_llm::{load, LlmError, LoadOptions, ModelSource};
use mistral_nemo_df11::MistralArch;

fn load_err(dir: &Path, bf16: bool) -> LlmError {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype: DType::F32,
        show_progress: false,
    };
    load::<MistralArch>(&opts)
        .err()
        .unwrap_or_else(|| panic!("{} loaded, expected an error", dir.display()))
}

#[test]
fn missing_folder() {
    let dir = fixtures().join("models/no-such-model");
    match load_err(&dir, false) {
        LlmError::FolderNotFound { path } => assert_eq!(path, dir),
        other => panic!("expected FolderNotFound, got {other:?}"),
    }
}

#[test]
fn another_architecture() {
    for (name, found) in [
        ("phi4-tiny", "Phi3ForCausalLM"),
        ("qwen3-tiny", "Qwen3ForCausalLM"),
        ("llama-tiny", "LlamaForCausalLM"),
    ] {
        match load_err(&model_dir(name, "df11"), false) {
            LlmError::WrongArchitecture {
                expected, found: f, ..
            } => {
                assert_eq!(expected, "Mistral");
                assert_eq!(f, found);
            }
            other => panic!("{name}: expected WrongArchitecture, got {other:?}"),
        }
    }
}

#[test]
fn wrong_format_either_way() {
    let e = load_err(&model_dir(MODEL, "bf16"), false);
    assert!(matches!(e, LlmError::NotDf11 { .. }), "{e:?}");
    let e = load_err(&model_dir(MODEL, "df11"), true);
    assert!(matches!(e, LlmError::UnexpectedDf11 { .. }), "{e:?}");
}

#[test]
fn unsupported_rope_scaling_and_bad_sizes_are_rejected() {
    let yarn = with_config(|c| {
        c["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0});
    });
    match load_err(yarn.path(), false) {
        LlmError::InvalidConfig { path, reason } => {
            assert_eq!(path, yarn.path().join("config.json"));
            assert!(reason.contains("yarn"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let odd = with_config(|c| c["head_dim"] = serde_json::json!(47));
    let e = load_err(odd.path(), false);
    assert!(matches!(e, LlmError::InvalidConfig { .. }), "{e:?}");
    let heads = with_config(|c| c["num_key_value_heads"] = serde_json::json!(3));
    let e = load_err(heads.path(), false);
    assert!(matches!(e, LlmError::InvalidConfig { .. }), "{e:?}");
}
