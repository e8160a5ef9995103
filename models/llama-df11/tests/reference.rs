//! The model against transformers' float32 reference: prompt ids, last-position logits (DF11 and
//! BF16 folders), a prefill split over the KV cache, and the greedy continuation.

mod common;

use candle_core::DType;
use common::*;
use df11_llm::{encode, generate, CausalLm, GenerationParams, SamplingParams};

#[test]
fn prompt_ids_match_the_reference_tokenizer() {
    for name in MODELS {
        let r = reference(name);
        let loaded = load_fixture(name, "df11", DType::F32);
        assert_eq!(r["add_special_tokens"], true);
        let got = encode(&loaded.tokenizer, r["prompt"].as_str().unwrap(), true).unwrap();
        assert_eq!(got, ids(&r["prompt_ids"]), "{name}");
    }
}

#[test]
fn last_logits_match_the_f32_reference() {
    for name in MODELS {
        let r = reference(name);
        let want = floats(&r["last_logits"]);
        for kind in ["df11", "bf16"] {
            let mut loaded = load_fixture(name, kind, DType::F32);
            let logits = loaded
                .model
                .forward(&input(&ids(&r["prompt_ids"])), 0)
                .unwrap();
            assert_eq!(logits.dims(), &[1, want.len()]);
            let got = logits.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
            assert_logits_close(&format!("{name}/{kind}"), &got, &want);
        }
    }
}

#[test]
fn logits_do_not_depend_on_how_the_prompt_is_split() {
    // Prefill in chunks through the KV cache gives the reference's last logits too: checks cache
    // offsets, masks and RoPE positions.
    for name in MODELS {
        let r = reference(name);
        let prompt = ids(&r["prompt_ids"]);
        let mut loaded = load_fixture(name, "df11", DType::F32);
        let m = &mut loaded.model;
        m.reset();
        let (split, last) = (prompt.len() / 2, prompt.len() - 1);
        m.forward(&input(&prompt[..split]), 0).unwrap();
        m.forward(&input(&prompt[split..last]), split).unwrap();
        let logits = m.forward(&input(&prompt[last..]), last).unwrap();
        let got = logits.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
        assert_logits_close(&format!("{name}/chunked"), &got, &floats(&r["last_logits"]));
    }
}

#[test]
fn greedy_tokens_match_the_reference() {
    for name in MODELS {
        let r = reference(name);
        let want = comparable_greedy(&r, 1e-3);
        assert!(!want.is_empty(), "{name}: nothing to compare");
        let mut loaded = load_fixture(name, "df11", DType::F32);
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
        assert_eq!(&g.generated_tokens[..want.len()], &want[..], "{name}");
    }
}

#[test]
fn the_llama3_rope_scaling_is_what_matches() {
    // Without its `rope_scaling` the same weights miss the reference by far (by 8.5e-3, 85 times
    // the tolerance): the fixture's scaling changes most rotary frequencies, so the check above
    // really tests it.
    for name in MODELS {
        let r = reference(name);
        let plain = copy_with_config(&model_dir(name, "df11"), |c| {
            c["rope_scaling"] = serde_json::Value::Null
        });
        let mut loaded = df11_llm::load::<Arch>(&options(plain.path(), false, DType::F32)).unwrap();
        let logits = loaded
            .model
            .forward(&input(&ids(&r["prompt_ids"])), 0)
            .unwrap();
        let got = logits.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
        let worst = got
            .iter()
            .zip(floats(&r["last_logits"]))
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0.0, f64::max);
        assert!(worst > 1e-3, "{name}: unscaled RoPE still within {worst:e}");
    }
}
