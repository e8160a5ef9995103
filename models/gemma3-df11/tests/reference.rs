//! What is particular to Gemma 3 against transformers' reference: the sliding window changes
//! the logits by the amount transformers recorded (so it is applied, and where transformers
//! applies it); a checkpoint without the language model's weights is a missing-tensor error.

use candle_core::{DType, Device};
use df11_candle::{Df11Error, ModelWeights, WeightFormat};
use df11_llm::testing::ModelUnderTest;
use df11_llm::testing::{copy_fixture, floats, ids, input, model_dir, reference, values};
use df11_llm::{Architecture, CausalLm, DecoderModel, LlmError, LoadBar, ModelConfig};
use gemma3_df11::Gemma3Arch;

const NAME: &str = "gemma3-tiny";

#[test]
fn the_sliding_window_matters_as_recorded() {
    let r = reference(NAME);
    let check = &r["sliding_window_check"];
    let dir = model_dir(NAME, "df11");
    let weights = ModelWeights::open(&dir, WeightFormat::Df11, &Device::Cpu, DType::F32).unwrap();
    let mut spec = Gemma3Arch::spec(&ModelConfig::open(&dir).unwrap(), &weights).unwrap();
    let windows: Vec<_> = spec.layers.iter().filter_map(|l| l.window).collect();
    assert!(!windows.is_empty());
    for w in windows {
        assert_eq!(w as u64, check["sliding_window"].as_u64().unwrap());
    }
    for layer in &mut spec.layers {
        layer.window = None;
    }
    let mut model = DecoderModel::load(spec, &weights, &LoadBar::hidden()).unwrap();
    let got = values(&model.forward(&input(&ids(&r["prompt_ids"])), 0).unwrap());
    let change = got
        .iter()
        .zip(floats(&r["last_logits"]))
        .map(|(g, w)| (*g as f64 - w).abs())
        .fold(0.0, f64::max);
    let recorded = check["max_abs_last_logits_change_if_window_disabled"]
        .as_f64()
        .unwrap();
    assert!(
        (change - recorded).abs() < 1e-3,
        "window disabled: change {change}, recorded {recorded}"
    );
}

#[test]
fn no_language_model_weights_is_a_missing_tensor() {
    // model.safetensors holds the embedding table: without it no layout is recognised.
    let tmp = copy_fixture(&model_dir(NAME, "df11"), "model.safetensors", |_| {});
    let gemma = ModelUnderTest::of::<Gemma3Arch>(&[NAME], "gemma3-df11".into())
        .with_vars(|name| std::env::var(name).ok());
    match gemma.try_load(tmp.path(), false, DType::F32) {
        Err(LlmError::Df11(Df11Error::MissingTensor { tensor, .. })) => {
            assert!(tensor.ends_with("embed_tokens.weight"), "{tensor}")
        }
        Err(other) => panic!("expected a missing tensor, got {other:?}"),
        Ok(_) => panic!("loaded without model.safetensors"),
    }
}
