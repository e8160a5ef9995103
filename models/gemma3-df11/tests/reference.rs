//! The Gemma 3 model against transformers' float32 reference: prompt ids, last-position logits,
//! the argmax of every position (token by token through the KV cache, past the sliding window),
//! the effect of the sliding window, and the greedy continuation.

mod common;

use candle_core::{DType, Device};
use common::*;
use df11_candle::{ModelWeights, WeightFormat};
use df11_llm::{
    encode, generate, CausalLm, GenerationParams, LoadBar, ModelConfig, SamplingParams,
};
use gemma3_df11::{Gemma3, Gemma3Config};

#[test]
fn prompt_ids_match_the_reference_tokenizer() {
    let r = reference(NAME);
    let loaded = load_fixture("df11", DType::F32);
    assert_eq!(r["add_special_tokens"], true);
    let got = encode(&loaded.tokenizer, r["prompt"].as_str().unwrap(), true).unwrap();
    assert_eq!(got, ids(&r["prompt_ids"]));
}

#[test]
fn last_logits_match_the_f32_reference() {
    let r = reference(NAME);
    let want = floats(&r["last_logits"]);
    for kind in ["df11", "bf16"] {
        let mut loaded = load_fixture(kind, DType::F32);
        let logits = loaded
            .model
            .forward(&input(&ids(&r["prompt_ids"])), 0)
            .unwrap();
        assert_eq!(logits.dims(), &[1, want.len()]);
        assert_logits_close(&format!("{NAME}/{kind}"), &values(&logits), &want);
    }
}

#[test]
fn token_by_token_and_chunked_prefill_match_the_reference() {
    // Through the KV cache, one token at a time: every position's argmax (where the recorded
    // margin is clear) and the last logits. Positions past the window (8) check the sliding mask
    // of single-query steps.
    let r = reference(NAME);
    let prompt = ids(&r["prompt_ids"]);
    let want = floats(&r["last_logits"]);
    let argmax = ids(&r["argmax_per_position"]);
    let margins = floats(&r["margin_per_position"]);
    let mut loaded = load_fixture("df11", DType::F32);
    let m = &mut loaded.model;
    m.reset();
    let mut last = Vec::new();
    for (pos, &t) in prompt.iter().enumerate() {
        last = values(&m.forward(&input(&[t]), pos).unwrap());
        let best = (0..last.len())
            .max_by(|&a, &b| last[a].total_cmp(&last[b]))
            .unwrap() as u32;
        if margins[pos] > 1e-3 {
            assert_eq!(best, argmax[pos], "position {pos}");
        }
    }
    assert_logits_close("token by token", &last, &want);

    // In uneven chunks (multi-query steps with an offset, across the window).
    m.reset();
    let cuts = [0, 5, 19, 20, prompt.len() - 1, prompt.len()];
    for w in cuts.windows(2) {
        last = values(&m.forward(&input(&prompt[w[0]..w[1]]), w[0]).unwrap());
    }
    assert_logits_close("chunked", &last, &want);
}

#[test]
fn the_sliding_window_matters_as_recorded() {
    // Without the window the last logits move by the amount transformers recorded: the window
    // is really applied (and applied where transformers applies it).
    let r = reference(NAME);
    let check = &r["sliding_window_check"];
    let dir = model_dir(NAME, "df11");
    let mut cfg = Gemma3Config::from_model_config(&ModelConfig::open(&dir).unwrap()).unwrap();
    assert_eq!(
        cfg.sliding_window as u64,
        check["sliding_window"].as_u64().unwrap()
    );
    cfg.sliding_window = cfg.max_position_embeddings;
    let weights = ModelWeights::open(&dir, WeightFormat::Df11, &Device::Cpu, DType::F32).unwrap();
    let mut model = Gemma3::load(&cfg, &weights, &LoadBar::hidden()).unwrap();
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
fn bf16_compute_is_close_to_the_reference() {
    // BF16 compute is not the reference's f32: only a loose bound, scaled from transformers' own
    // BF16-vs-f32 difference.
    let r = reference(NAME);
    let want = floats(&r["last_logits"]);
    let hf = r["error_estimates"]["max_abs_last_logits_bf16_compute_vs_f32"]
        .as_f64()
        .unwrap();
    let mut loaded = load_fixture("df11", DType::BF16);
    let got = values(
        &loaded
            .model
            .forward(&input(&ids(&r["prompt_ids"])), 0)
            .unwrap(),
    );
    let diff = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (*g as f64 - w).abs())
        .fold(0.0, f64::max);
    eprintln!("bf16 compute: max |diff| {diff:e} (transformers: {hf:e})");
    assert!(diff < 3.0 * hf, "bf16 compute: max |diff| {diff} vs {hf}");
}

#[test]
fn greedy_tokens_match_the_reference() {
    let r = reference(NAME);
    let want = comparable_greedy(&r, 1e-3);
    assert!(!want.is_empty(), "nothing to compare");
    let mut loaded = load_fixture("df11", DType::F32);
    let params = GenerationParams {
        max_new_tokens: r["greedy"]["n_new_tokens"].as_u64().unwrap() as usize,
        // The reference generates without stopping at EOS.
        eos_token_ids: Vec::new(),
        sampling: SamplingParams::greedy(),
    };
    let g = generate(
        &mut loaded.model,
        &loaded.tokenizer,
        &ids(&r["prompt_ids"]),
        &params,
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(g.generated_tokens.len(), params.max_new_tokens);
    assert_eq!(&g.generated_tokens[..want.len()], &want[..]);
    assert_eq!(
        g.text,
        loaded.tokenizer.decode(&g.generated_tokens, true).unwrap()
    );
}
