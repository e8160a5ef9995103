//! Clear, typed errors for the usual mistakes: a missing folder, another architecture, the
//! wrong format, and configs this model does not run (RoPE scaling).

mod common;

use std::path::Path;

use candle_core::{DType, Device};
use common::*;
use df11_llm::{load, LlmError, LoadOptions, ModelSource};
use phi4_df11::Phi4Arch;

fn load_err(dir: &Path, bf16: bool) -> LlmError {
    let opts = LoadOptions {
        source: ModelSource::Local(dir.to_path_buf()),
        bf16,
        device: Device::Cpu,
        dtype: DType::F32,
        show_progress: false,
    };
    load::<Phi4Arch>(&opts)
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
        ("mistral-nemo-tiny", "MistralForCausalLM"),
        ("qwen3-tiny", "Qwen3ForCausalLM"),
        ("llama-tiny", "LlamaForCausalLM"),
    ] {
        match load_err(&model_dir(name, "df11"), false) {
            LlmError::WrongArchitecture {
                expected, found: f, ..
            } => {
                assert_eq!(expected, "Phi-4");
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

/// A copy of the DF11 fixture with `edit` applied to its config.json.
fn with_config(edit: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
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

#[test]
fn longrope_and_bad_rotary_factor_are_rejected() {
    let longrope = with_config(|c| {
        c["rope_scaling"] = serde_json::json!({
            "type": "longrope", "short_factor": vec![1.0; 16], "long_factor": vec![2.0; 16]
        });
    });
    match load_err(longrope.path(), false) {
        LlmError::InvalidConfig { path, reason } => {
            assert_eq!(path, longrope.path().join("config.json"));
            assert!(reason.contains("longrope"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let odd = with_config(|c| c["partial_rotary_factor"] = serde_json::json!(0.3));
    let e = load_err(odd.path(), false);
    assert!(matches!(e, LlmError::InvalidConfig { .. }), "{e:?}");
}
