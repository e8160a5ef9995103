//! Clear, typed errors for the usual mistakes, found before any weight is read where possible:
//! a missing folder or file, another architecture, the wrong format, a legacy repo, configs the
//! architecture does not run.

use candle_core::DType;
use df11_candle::Df11Error;

use super::{copy_fixture, fixtures, model_dir, text_config, ModelUnderTest};
use crate::LlmError;

/// Loads `dir` and returns the error (panics if it loads).
fn load_err(m: &ModelUnderTest, dir: &std::path::Path, bf16: bool) -> LlmError {
    match m.try_load(dir, bf16, DType::F32) {
        Ok(_) => panic!("{} loaded, expected an error", dir.display()),
        Err(e) => e,
    }
}

/// A folder that does not exist.
pub fn missing_folder(m: &ModelUnderTest) {
    let dir = fixtures().join("models/no-such-model");
    match load_err(m, &dir, false) {
        LlmError::FolderNotFound { path } => assert_eq!(path, dir),
        other => panic!("expected FolderNotFound, got {other:?}"),
    }
}

/// Every fixture of another architecture is refused by name.
pub fn another_architecture(m: &ModelUnderTest) {
    for (name, found) in m.other_architectures() {
        match load_err(m, &model_dir(&name, "df11"), false) {
            LlmError::WrongArchitecture {
                expected, found: f, ..
            } => {
                assert_eq!(expected, m.name);
                assert_eq!(f, found, "{name}");
            }
            other => panic!("{name}: expected WrongArchitecture, got {other:?}"),
        }
    }
}

/// A BF16 folder where DF11 was asked (the message says `--bf16`), and the other way round.
pub fn wrong_format_either_way(m: &ModelUnderTest) {
    for name in m.fixtures {
        let dir = model_dir(name, "bf16");
        let e = load_err(m, &dir, false);
        assert!(
            matches!(e, LlmError::NotDf11 { ref path } if *path == dir),
            "{e:?}"
        );
        assert!(e.to_string().contains("--bf16"), "{e}");
        let e = load_err(m, &model_dir(name, "df11"), true);
        assert!(matches!(e, LlmError::UnexpectedDf11 { .. }), "{e:?}");
    }
}

/// A folder without `tokenizer.json` or `config.json` names the file; without a weights file
/// the format's error names what is missing.
pub fn missing_tokenizer_config_and_weights(m: &ModelUnderTest) {
    let src = model_dir(m.fixtures[0], "df11");
    for file in ["tokenizer.json", "config.json"] {
        let tmp = copy_fixture(&src, file, |_| {});
        match load_err(m, tmp.path(), false) {
            LlmError::MissingFile { dir, file: f } => {
                assert_eq!(dir, tmp.path());
                assert_eq!(f, file);
            }
            other => panic!("expected MissingFile({file}), got {other:?}"),
        }
    }
    let mut shards: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    shards.sort();
    assert!(!shards.is_empty());
    for shard in shards {
        let tmp = copy_fixture(&src, &shard, |_| {});
        match load_err(m, tmp.path(), false) {
            LlmError::Df11(_) => {}
            other => panic!("without {shard}: expected the format's error, got {other:?}"),
        }
    }
}

/// A folder shaped like a legacy DFloat11 0.1.0 repo (a config of only `dfloat11_version` and
/// pickled layers) is named as such, not reported as an unknown architecture.
pub fn legacy_pickle_repo_is_named_as_such(m: &ModelUnderTest) {
    let tmp = tempfile::tempdir().unwrap();
    let config = r#"{"dfloat11_version": "0.1.0"}"#;
    std::fs::write(tmp.path().join("config.json"), config).unwrap();
    std::fs::write(tmp.path().join("layer_0.pkl"), b"\x80\x04\x95 pickle").unwrap();
    let e = load_err(m, tmp.path(), false);
    assert!(
        matches!(e, LlmError::Df11(Df11Error::LegacyPickle { .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("legacy DFloat11 0.1.0"), "{e}");
}

/// Configs this architecture cannot run are `InvalidConfig` errors naming the file: an
/// unsupported RoPE scaling, key/value heads that do not divide the heads, an odd head size.
pub fn unsupported_configs_are_invalid_config(m: &ModelUnderTest) {
    let src = model_dir(m.fixtures[0], "df11");
    let edits: [(&str, serde_json::Value); 3] = [
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "yarn", "factor": 4.0}),
        ),
        ("num_key_value_heads", serde_json::json!(3)),
        ("head_dim", serde_json::json!(47)),
    ];
    for (key, value) in edits {
        let tmp = copy_fixture(&src, "", |c| text_config(c)[key] = value.clone());
        match load_err(m, tmp.path(), false) {
            LlmError::InvalidConfig { path, reason } => {
                assert_eq!(path, tmp.path().join("config.json"), "{key}");
                if key == "rope_scaling" {
                    assert!(reason.contains("yarn"), "{reason}");
                }
            }
            other => panic!("{key}: expected InvalidConfig, got {other:?}"),
        }
    }
}

/// Values outside their range, as a damaged config carries them, are refused before the model
/// runs, each with an error naming the file, the field and the value: a RoPE base of 0, -1 or
/// 1e308, no layers, fewer layers than the weights hold (the unused weights named), a context
/// no cache can hold, a DF11 format version we do not read.
pub fn out_of_range_configs_are_refused(m: &ModelUnderTest) {
    use serde_json::json;
    let src = model_dir(m.fixtures[0], "df11");
    let cases: [(&str, serde_json::Value, &[&str]); 5] = [
        ("rope_theta", json!(0.0), &["rope_theta", " 0 "]),
        ("rope_theta", json!(-1.0), &["rope_theta", "-1"]),
        ("rope_theta", json!(1e308), &["rope_theta", "1e308"]),
        ("num_hidden_layers", json!(0), &["num_hidden_layers", " 0 "]),
        (
            "max_position_embeddings",
            json!(1u64 << 40),
            &["max_position_embeddings", "1099511627776"],
        ),
    ];
    for (key, value, needles) in cases {
        let tmp = copy_fixture(&src, "", |c| text_config(c)[key] = value.clone());
        match load_err(m, tmp.path(), false) {
            LlmError::InvalidConfig { path, reason } => {
                assert_eq!(path, tmp.path().join("config.json"), "{key} = {value}");
                let reason = format!(" {reason} ");
                for n in needles {
                    assert!(reason.contains(n), "{key} = {value}: {reason}");
                }
            }
            other => panic!("{key} = {value}: expected InvalidConfig, got {other:?}"),
        }
    }

    // One layer fewer than the weights hold, DF11 and BF16: the last layer's weights are named.
    for format in ["df11", "bf16"] {
        let src = model_dir(m.fixtures[0], format);
        let mut layers = 0;
        let tmp = copy_fixture(&src, "", |c| {
            let text = text_config(c);
            layers = text["num_hidden_layers"].as_u64().unwrap();
            text["num_hidden_layers"] = json!(layers - 1);
            if let Some(types) = text.get_mut("layer_types").and_then(|t| t.as_array_mut()) {
                types.truncate(layers as usize - 1);
            }
        });
        assert!(layers >= 2, "the fixture has {layers} layers");
        match load_err(m, tmp.path(), format == "bf16") {
            LlmError::InvalidConfig { path, reason } => {
                assert_eq!(path, tmp.path().join("config.json"), "{format}");
                let needles = [
                    format!("num_hidden_layers is {}", layers - 1),
                    format!("layers.{}.", layers - 1),
                ];
                for n in needles {
                    assert!(reason.contains(&n), "{format}: {reason}");
                }
            }
            other => panic!("{format}, one layer fewer: expected InvalidConfig, got {other:?}"),
        }
    }

    // A DF11 format version we do not read.
    let tmp = copy_fixture(&src, "", |c| {
        c["dfloat11_config"]["version"] = "9.9.9".into()
    });
    match load_err(m, tmp.path(), false) {
        LlmError::Df11(e @ Df11Error::UnsupportedVersion { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("9.9.9") && msg.contains("config.json"),
                "{msg}"
            );
        }
        other => panic!("version 9.9.9: expected UnsupportedVersion, got {other:?}"),
    }
}
