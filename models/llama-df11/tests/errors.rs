//! Clear, typed errors for the usual mistakes, found before any weight is read.

mod common;

use std::path::Path;

use candle_core::DType;
use common::*;
use df11_candle::Df11Error;
use df11_llm::{load, LlmError};

fn load_err(dir: &Path, bf16: bool) -> LlmError {
    load::<Arch>(&options(dir, bf16, DType::F32))
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
    for (name, found) in OTHERS {
        match load_err(&model_dir(name, "df11"), false) {
            LlmError::WrongArchitecture {
                expected, found: f, ..
            } => {
                assert_eq!(expected, "Llama");
                assert_eq!(f, found);
            }
            other => panic!("{name}: expected WrongArchitecture, got {other:?}"),
        }
    }
}

#[test]
fn bf16_folder_when_df11_was_asked() {
    let dir = model_dir(MODELS[0], "bf16");
    let e = load_err(&dir, false);
    assert!(matches!(e, LlmError::NotDf11 { .. }), "{e:?}");
}

#[test]
fn legacy_pickle_repo_is_named_as_such() {
    let legacy = legacy_repo();
    // With a model config beside the pickles (as a 0.1.0 repo may have), too.
    let with_config = tempfile::tempdir().unwrap();
    std::fs::copy(
        model_dir(MODELS[0], "bf16").join("config.json"),
        with_config.path().join("config.json"),
    )
    .unwrap();
    std::fs::write(with_config.path().join("layer_0.pkl"), b"\x80\x04").unwrap();
    for dir in [legacy.path(), with_config.path()] {
        let e = load_err(dir, false);
        match &e {
            LlmError::Df11(Df11Error::LegacyPickle { path }) => assert_eq!(path, dir),
            other => panic!("{}: expected LegacyPickle, got {other:?}", dir.display()),
        }
        let message = e.to_string();
        assert!(message.contains("legacy DFloat11 0.1.0"), "{message}");
    }
}
