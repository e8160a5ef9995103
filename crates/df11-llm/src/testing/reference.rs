//! The model against transformers' float32 reference (`reference.json` of each fixture), with the
//! tolerances of the fixtures' README: 1e-4 + 1e-4·|x| on logits, tokens compared only where the
//! recorded top-1/top-2 margin is above 1e-3.

use candle_core::DType;

use super::{
    assert_logits_close, comparable_greedy, floats, ids, input, model_dir, reference, values,
    ModelUnderTest,
};
use crate::{encode, generate, load_tokenizer, CausalLm, ChatTemplate, GenerationParams};
use crate::{Message, SamplingParams};

/// Margins below this are numerical noise: tokens there are not compared.
const MIN_MARGIN: f64 = 1e-3;

/// The prompt encodes to the reference's ids.
pub fn prompt_ids_match_the_reference_tokenizer(m: &ModelUnderTest) {
    for name in m.fixtures {
        let r = reference(name);
        assert_eq!(r["add_special_tokens"], true);
        let loaded = m.load_fixture(name, "df11", DType::F32);
        let got = encode(&loaded.tokenizer, r["prompt"].as_str().unwrap(), true).unwrap();
        assert_eq!(got, ids(&r["prompt_ids"]), "{name}");
    }
}

/// The last position's logits of one prefill, DF11 and BF16 folders, in f32.
pub fn last_logits_match_the_f32_reference(m: &ModelUnderTest) {
    for name in m.fixtures {
        let r = reference(name);
        let want = floats(&r["last_logits"]);
        for kind in ["df11", "bf16"] {
            let mut loaded = m.load_fixture(name, kind, DType::F32);
            let logits = loaded
                .model
                .forward(&input(&ids(&r["prompt_ids"])), 0)
                .unwrap();
            assert_eq!(logits.dims(), &[1, want.len()]);
            assert_logits_close(&format!("{name}/{kind}"), &values(&logits), &want);
        }
    }
}

/// Through the KV cache, one token at a time: every position's argmax (where its margin is
/// clear) and the last logits; then in uneven chunks (multi-query steps at an offset, across
/// sliding windows): the last logits. Checks cache offsets, masks and RoPE positions.
pub fn token_by_token_and_chunked_prefill_match_the_reference(m: &ModelUnderTest) {
    for name in m.fixtures {
        let r = reference(name);
        let prompt = ids(&r["prompt_ids"]);
        let want = floats(&r["last_logits"]);
        let argmax = ids(&r["argmax_per_position"]);
        let margins = floats(&r["margin_per_position"]);
        assert_eq!((argmax.len(), margins.len()), (prompt.len(), prompt.len()));
        let compared = margins.iter().filter(|m| **m >= MIN_MARGIN).count();
        assert!(
            4 * compared >= 3 * prompt.len(),
            "{name}: few comparable positions"
        );
        let mut loaded = m.load_fixture(name, "df11", DType::F32);
        let model = &mut loaded.model;
        model.reset();
        let mut last = Vec::new();
        for (pos, &t) in prompt.iter().enumerate() {
            last = values(&model.forward(&input(&[t]), pos).unwrap());
            let best = (0..last.len())
                .max_by(|&a, &b| last[a].total_cmp(&last[b]))
                .unwrap() as u32;
            if margins[pos] >= MIN_MARGIN {
                assert_eq!(best, argmax[pos], "{name}: position {pos}");
            }
        }
        assert_logits_close(&format!("{name}/token by token"), &last, &want);

        model.reset();
        let n = prompt.len();
        let mut cuts = vec![0, 5.min(n - 1), (n / 2).max(6).min(n - 1), n - 1, n];
        cuts.dedup();
        for w in cuts.windows(2) {
            last = values(&model.forward(&input(&prompt[w[0]..w[1]]), w[0]).unwrap());
        }
        assert_logits_close(&format!("{name}/chunked {cuts:?}"), &last, &want);
    }
}

/// Greedy generation (no EOS stop, as the reference) gives the reference's tokens up to the
/// first unclear margin, and its text is the tokenizer's decoding of them.
pub fn greedy_tokens_match_the_reference(m: &ModelUnderTest) {
    for name in m.fixtures {
        let r = reference(name);
        let want = comparable_greedy(&r, MIN_MARGIN);
        assert!(!want.is_empty(), "{name}: nothing to compare");
        let mut loaded = m.load_fixture(name, "df11", DType::F32);
        let params = GenerationParams {
            max_new_tokens: r["greedy"]["n_new_tokens"].as_u64().unwrap() as usize,
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
        assert_eq!(g.peak_gpu_bytes, None);
        let text = loaded.tokenizer.decode(&g.generated_tokens, true).unwrap();
        assert_eq!(g.text, text, "{name}");
    }
}

/// BF16 compute is not the reference's f32: a loose bound, 3x transformers' own BF16-vs-f32
/// difference on the last logits (recorded in `error_estimates`).
pub fn bf16_compute_is_close_to_the_reference(m: &ModelUnderTest) {
    for name in m.fixtures {
        let r = reference(name);
        let want = floats(&r["last_logits"]);
        let hf = r["error_estimates"]["max_abs_last_logits_bf16_compute_vs_f32"]
            .as_f64()
            .unwrap();
        let mut loaded = m.load_fixture(name, "df11", DType::BF16);
        let logits = loaded.model.forward(&input(&ids(&r["prompt_ids"])), 0);
        let got = values(&logits.unwrap());
        let diff = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0.0, f64::max);
        eprintln!("{name}: bf16 compute max |diff| {diff:e} (transformers: {hf:e})");
        assert!(diff < 3.0 * hf, "{name}: bf16 compute {diff} vs {hf}");
    }
}

/// The repo's chat template renders the reference's messages as transformers does (text and
/// ids), from the DF11 and the BF16 folder.
pub fn chat_template_matches_transformers(m: &ModelUnderTest) {
    for name in m.fixtures {
        let check = &reference(name)["chat_template_check"];
        assert_eq!(check["add_generation_prompt"], true);
        let messages: Vec<Message> = check["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message {
                role: m["role"].as_str().unwrap().to_string(),
                content: m["content"].as_str().unwrap().to_string(),
            })
            .collect();
        let want = check["rendered"].as_str().unwrap();
        for kind in ["df11", "bf16"] {
            let dir = model_dir(name, kind);
            let template = ChatTemplate::from_dir(&dir)
                .unwrap()
                .expect("the fixture has a chat template");
            // The CLI passes enable_thinking; a template that does not use it is unaffected.
            for thinking in [None, Some(false)] {
                let got = template.render(&messages, true, thinking).unwrap();
                assert_eq!(got, want, "{name}/{kind} thinking={thinking:?}");
            }
            let tokenizer = load_tokenizer(&dir).unwrap();
            let got_ids = encode(&tokenizer, want, false).unwrap();
            assert_eq!(got_ids, ids(&check["ids"]), "{name}/{kind}");
        }
    }
}
