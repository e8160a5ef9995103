//! The other checkpoint layouts load and give the same logits: transformers ≥ 4.52 multimodal
//! names (`model.language_model.…`) and a text-only `Gemma3ForCausalLM` (`model.…`, flat config,
//! no vision weights at all). Made from the BF16 fixture by renaming its tensors.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use df11_llm::testing::{
    assert_logits_close, floats, ids, input, model_dir, reference, values, ModelUnderTest,
};
use df11_llm::CausalLm;
use serde_json::Value;

const NAME: &str = "gemma3-tiny";

/// A copy of the BF16 fixture with tensors renamed by `rename` (dropped on `None`) and the config
/// rewritten by `edit`.
fn variant(
    rename: impl Fn(&str) -> Option<String>,
    edit: impl Fn(Value) -> Value,
) -> tempfile::TempDir {
    let src = model_dir(NAME, "bf16");
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name != "model.safetensors" && name != "config.json" {
            std::fs::copy(entry.path(), tmp.path().join(&name)).unwrap();
        }
    }
    let tensors =
        candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    let renamed: HashMap<String, Tensor> = tensors
        .into_iter()
        .filter_map(|(k, v)| rename(&k).map(|k| (k, v)))
        .collect();
    candle_core::safetensors::save(&renamed, tmp.path().join("model.safetensors")).unwrap();
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    std::fs::write(tmp.path().join("config.json"), edit(config).to_string()).unwrap();
    tmp
}

fn logits(dir: &Path) -> Vec<f32> {
    let prompt = ids(&reference(NAME)["prompt_ids"]);
    let gemma = ModelUnderTest::of::<gemma3_df11::Gemma3Arch>(&[NAME], "gemma3-df11".into())
        .with_vars(|name| std::env::var(name).ok());
    let mut loaded = gemma.load_dir(dir, true, DType::F32);
    values(&loaded.model.forward(&input(&prompt), 0).unwrap())
}

#[test]
fn newer_multimodal_layout() {
    let tmp = variant(
        |k| {
            Some(match k.strip_prefix("language_model.model.") {
                Some(rest) => format!("model.language_model.{rest}"),
                None => format!("model.{k}"),
            })
        },
        |c| c,
    );
    assert_eq!(logits(tmp.path()), logits(&model_dir(NAME, "bf16")));
}

#[test]
fn text_only_checkpoint() {
    let tmp = variant(
        |k| k.strip_prefix("language_model.").map(str::to_string),
        |c| {
            let mut text = c["text_config"].clone();
            text["architectures"] = serde_json::json!(["Gemma3ForCausalLM"]);
            text["eos_token_id"] = c["eos_token_id"].clone();
            text
        },
    );
    let want = floats(&reference(NAME)["last_logits"]);
    let got = logits(tmp.path());
    assert_eq!(got, logits(&model_dir(NAME, "bf16")));
    assert_logits_close("text-only", &got, &want);
}
