//! What is particular to Phi-4's config: RoPE scaling (`longrope`, Phi-3.5/Phi-4-mini) and a
//! partial rotary factor giving an odd number of rotated features are refused by name.

use candle_core::DType;
use df11_llm::testing::{copy_fixture, model_dir, ModelUnderTest};
use df11_llm::LlmError;

const MODEL: &str = "phi4-tiny";

fn load_err(edit: impl FnOnce(&mut serde_json::Value)) -> (tempfile::TempDir, LlmError) {
    let tmp = copy_fixture(&model_dir(MODEL, "df11"), "", edit);
    let phi4 = ModelUnderTest::of::<phi4_df11::Phi4Arch>(&[MODEL], "".into())
        .with_vars(|name| std::env::var(name).ok());
    match phi4.try_load(tmp.path(), false, DType::F32) {
        Ok(_) => panic!("loaded, expected an error"),
        Err(e) => (tmp, e),
    }
}

#[test]
fn longrope_and_bad_rotary_factor_are_rejected() {
    let (dir, e) = load_err(|c| {
        c["rope_scaling"] = serde_json::json!({
            "type": "longrope", "short_factor": vec![1.0; 16], "long_factor": vec![2.0; 16]
        });
    });
    match e {
        LlmError::InvalidConfig { path, reason } => {
            assert_eq!(path, dir.path().join("config.json"));
            assert!(reason.contains("longrope"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let (_, e) = load_err(|c| c["partial_rotary_factor"] = serde_json::json!(0.3));
    assert!(matches!(e, LlmError::InvalidConfig { .. }), "{e:?}");
}
