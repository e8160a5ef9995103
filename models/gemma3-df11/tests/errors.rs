//! Clear, typed errors for the usual mistakes, found before any weight is read where possible.

mod common;

use std::path::Path;

use candle_core::{DType, Device};
use common::*;
use df11_candle::Df11Error;
use df11_llm::{load, LlmError, LoadOptions, ModelSource};
use gemma3_df11::Gemma3Arch;

fn load_err(dir: &Path, bf16: bool) -> LlmError {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype: DType::F32,
        show_progress: false,
    };
    load::<Gemma3Arch>(&opts)
        .err()
        .unwrap_or_else(|| panic!("{} loaded, expected an error", dir.display()))
}

/// A copy of the DF11 fixture without `skip`.
fn copy_without(skip: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(model_dir(NAME, "df11")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != skip {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    tmp
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
        ("qwen3-tiny", "Qwen3ForCausalLM"),
        ("llama-tiny", "LlamaForCausalLM"),
        ("phi4-tiny", "Phi3ForCausalLM"),
    ] {
        match load_err(&model_dir(name, "df11"), false) {
            LlmError::WrongArchitecture {
                expected, found: f, ..
            } => {
                assert_eq!(expected, "Gemma 3");
                assert_eq!(f, found);
            }
            other => panic!("{name}: expected WrongArchitecture, got {other:?}"),
        }
    }
}

#[test]
fn bf16_folder_when_df11_was_asked_and_back() {
    let bf16 = model_dir(NAME, "bf16");
    let e = load_err(&bf16, false);
    assert!(
        matches!(e, LlmError::NotDf11 { ref path } if *path == bf16),
        "{e:?}"
    );
    let e = load_err(&model_dir(NAME, "df11"), true);
    assert!(matches!(e, LlmError::UnexpectedDf11 { .. }), "{e:?}");
}

#[test]
fn missing_files() {
    for file in ["tokenizer.json", "config.json"] {
        let tmp = copy_without(file);
        match load_err(tmp.path(), false) {
            LlmError::MissingFile { dir, file: f } => {
                assert_eq!(dir, tmp.path());
                assert_eq!(f, file);
            }
            other => panic!("expected MissingFile({file}), got {other:?}"),
        }
    }
    // A layer unit gone: the DF11 loader says so.
    let tmp = copy_without("language_model_model_layers_1.safetensors");
    let e = load_err(tmp.path(), false);
    assert!(matches!(e, LlmError::Df11(_)), "{e:?}");
}

#[test]
fn no_language_model_weights_is_a_missing_tensor() {
    // model.safetensors holds the embedding table: without it no layout is recognised.
    let tmp = copy_without("model.safetensors");
    match load_err(tmp.path(), false) {
        LlmError::Df11(Df11Error::MissingTensor { tensor, .. }) => {
            assert!(tensor.ends_with("embed_tokens.weight"), "{tensor}")
        }
        other => panic!("expected a missing tensor, got {other:?}"),
    }
}

#[test]
fn unsupported_config_is_invalid_config() {
    let tmp = copy_without("");
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["text_config"]["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 8.0});
    std::fs::write(&path, config.to_string()).unwrap();
    match load_err(tmp.path(), false) {
        LlmError::InvalidConfig { path: p, reason } => {
            assert_eq!(p, path);
            assert!(reason.contains("yarn"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}
