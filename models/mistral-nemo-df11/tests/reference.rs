//! What is particular to Mistral: Mistral-Nemo's context length loads without full tables, and a
//! sliding window (Mistral-7B v0.1) applies in prefill and in decode steps alike.

use candle_core::DType;
use df11_llm::testing::{
    assert_logits_close, copy_fixture, floats, ids, input, model_dir, reference, values,
    ModelUnderTest,
};
use df11_llm::CausalLm;

const MODEL: &str = "mistral-nemo-tiny";

/// A copy of the DF11 fixture with `edit` applied to its config.json.
fn with_config(edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    copy_fixture(&model_dir(MODEL, "df11"), "", edit)
}

/// Last-position logits of `prompt` with the model in `dir`, prefilled at once or one token at
/// a time through the KV cache.
fn last_logits(dir: &std::path::Path, prompt: &[u32], one_by_one: bool) -> Vec<f32> {
    let mistral = ModelUnderTest::of::<mistral_nemo_df11::MistralArch>(&[MODEL], "".into())
        .with_vars(|name| std::env::var(name).ok());
    let mut loaded = mistral.load_dir(dir, false, DType::F32);
    let m = &mut loaded.model;
    let logits = if one_by_one {
        for (pos, &t) in prompt[..prompt.len() - 1].iter().enumerate() {
            m.forward(&input(&[t]), pos).unwrap();
        }
        m.forward(&input(&prompt[prompt.len() - 1..]), prompt.len() - 1)
            .unwrap()
    } else {
        m.forward(&input(prompt), 0).unwrap()
    };
    values(&logits)
}

#[test]
fn nemo_context_length_loads_without_full_tables() {
    // Mistral-Nemo's real context: rotary tables and caches must not be sized for it up front.
    let r = reference(MODEL);
    let nemo = with_config(|c| c["max_position_embeddings"] = serde_json::json!(1_024_000));
    let got = last_logits(nemo.path(), &ids(&r["prompt_ids"]), false);
    assert_logits_close("1,024,000 positions", &got, &floats(&r["last_logits"]));
}

#[test]
fn sliding_window_applies_in_prefill_and_in_decode_steps() {
    // The fixture has no window; with one shorter than the prompt, prefill (masked) and
    // one-token decode steps (masked once keys leave the window) agree, and differ from the
    // full-attention reference.
    let r = reference(MODEL);
    let prompt = ids(&r["prompt_ids"]);
    let windowed = with_config(|c| c["sliding_window"] = serde_json::json!(8));
    let at_once = last_logits(windowed.path(), &prompt, false);
    let stepped = last_logits(windowed.path(), &prompt, true);
    let max_diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    assert!(max_diff(&at_once, &stepped) < 1e-5);
    let full: Vec<f32> = floats(&r["last_logits"])
        .iter()
        .map(|x| *x as f32)
        .collect();
    assert!(
        max_diff(&at_once, &full) > 1e-3,
        "the window changed nothing"
    );
}
