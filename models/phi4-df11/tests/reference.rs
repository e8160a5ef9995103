//! The Phi-4 model against transformers' float32 reference: last-position logits, prompt ids,
//! greedy continuation and per-position argmax (through the KV cache), and the repo's chat
//! template rendered as transformers renders it (`chat_template_check`, text and ids).

mod common;

use candle_core::DType;
use common::*;
use df11_llm::{
    encode, generate, load_tokenizer, CausalLm, ChatTemplate, GenerationParams, Message,
    SamplingParams,
};

/// `|got - want| <= 1e-4 + 1e-4 |want|` for every logit.
fn assert_logits_close(name: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name}: vocabulary size");
    let mut worst = (0.0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        let tol = 1e-4 + 1e-4 * w.abs();
        assert!(
            err <= tol,
            "{name}: logit {i}: got {g}, reference {w} (|diff| {err:e} > {tol:e})"
        );
        if err > worst.0 {
            worst = (err, i);
        }
    }
    eprintln!("{name}: max |diff| {:e} at {}", worst.0, worst.1);
}

#[test]
fn prompt_ids_match_the_reference_tokenizer() {
    for name in MODELS {
        let r = reference(name);
        let loaded = load_fixture(name, "df11", DType::F32);
        let prompt = r["prompt"].as_str().unwrap();
        assert_eq!(r["add_special_tokens"], true);
        let got = encode(&loaded.tokenizer, prompt, true).unwrap();
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
    // Prefill in two chunks through the KV cache must give the same last logits (within f32
    // noise) as one prefill: checks cache offsets, masks and RoPE positions.
    for name in MODELS {
        let r = reference(name);
        let prompt = ids(&r["prompt_ids"]);
        let want = floats(&r["last_logits"]);
        let mut loaded = load_fixture(name, "df11", DType::F32);
        let m = &mut loaded.model;
        m.reset();
        let split = prompt.len() / 2;
        m.forward(&input(&prompt[..split]), 0).unwrap();
        m.forward(&input(&prompt[split..prompt.len() - 1]), split)
            .unwrap();
        let logits = m
            .forward(&input(&prompt[prompt.len() - 1..]), prompt.len() - 1)
            .unwrap();
        let got = logits.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
        assert_logits_close(&format!("{name}/chunked"), &got, &want);
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
        assert_eq!(g.peak_gpu_bytes, None);
        assert_eq!(
            g.text,
            loaded.tokenizer.decode(&g.generated_tokens, true).unwrap()
        );
    }
}

#[test]
fn argmax_per_position_matches_where_the_margin_is_clear() {
    // One token at a time through the KV cache: every decode-step path, every position. The
    // fixture has a position with margin ~1e-4, which is left out.
    for name in MODELS {
        let r = reference(name);
        let prompt = ids(&r["prompt_ids"]);
        let want = comparable_argmax(&r, 1e-3);
        assert!(
            4 * want.len() >= 3 * prompt.len(),
            "{name}: few comparable positions"
        );
        let mut loaded = load_fixture(name, "df11", DType::F32);
        let got = argmax_per_position(&mut loaded.model, &prompt);
        for (pos, token) in want {
            assert_eq!(got[pos], token, "{name}: position {pos}");
        }
    }
}

#[test]
fn chat_template_matches_transformers() {
    for name in MODELS {
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
        for kind in ["df11", "bf16"] {
            let dir = model_dir(name, kind);
            let template = ChatTemplate::from_dir(&dir)
                .unwrap()
                .expect("the fixture has a chat template");
            let want = check["rendered"].as_str().unwrap();
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
