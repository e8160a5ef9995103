//! Clear, typed errors for the usual mistakes, found before any weight is read.

mod common;

use std::path::Path;

use candle_core::{DType, Device};
use common::*;
use df11_llm::{load, LlmError, LoadOptions, ModelSource};
use qwen3_df11::Qwen3Arch;

fn load_err(dir: &Path, bf16: bool) -> LlmError {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype: DType::F32,
        show_progress: false,
    };
    load::<Qwen3Arch>(&opts)
        .err()
        .unwrap_or_else(|| panic!("{} loaded, expected an error", dir.display()))
}

/// A copy of a fixture folder without `skip`.
fn copy_without(src: &Path, skip: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
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
fn bf16_folder_when_df11_was_asked() {
    let dir = model_dir("qwen3-tiny", "bf16");
    let e = load_err(&dir, false);
    assert!(
        matches!(e, LlmError::NotDf11 { ref path } if *path == dir),
        "{e:?}"
    );
    assert!(e.to_string().contains("--bf16"), "{e}");
}

#[test]
fn df11_folder_when_bf16_was_asked() {
    let dir = model_dir("qwen3-tied-tiny", "df11");
    let e = load_err(&dir, true);
    assert!(matches!(e, LlmError::UnexpectedDf11 { .. }), "{e:?}");
}

#[test]
fn another_architecture() {
    for (name, found) in [
        ("llama-tiny", "LlamaForCausalLM"),
        ("qwen2-tiny", "Qwen2ForCausalLM"),
    ] {
        match load_err(&model_dir(name, "df11"), false) {
            LlmError::WrongArchitecture {
                expected, found: f, ..
            } => {
                assert_eq!(expected, "Qwen3");
                assert_eq!(f, found);
            }
            other => panic!("{name}: expected WrongArchitecture, got {other:?}"),
        }
    }
}

#[test]
fn missing_tokenizer_and_config() {
    for file in ["tokenizer.json", "config.json"] {
        let tmp = copy_without(&model_dir("qwen3-tiny", "df11"), file);
        match load_err(tmp.path(), false) {
            LlmError::MissingFile { dir, file: f } => {
                assert_eq!(dir, tmp.path());
                assert_eq!(f, file);
            }
            other => panic!("expected MissingFile({file}), got {other:?}"),
        }
    }
}

#[test]
fn missing_weights_are_a_df11_error() {
    let tmp = copy_without(
        &model_dir("qwen3-tiny", "df11"),
        "model_layers_1.safetensors",
    );
    let e = load_err(tmp.path(), false);
    assert!(matches!(e, LlmError::Df11(_)), "{e:?}");
}
