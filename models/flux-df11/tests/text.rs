//! The text encoders on the FLUX fixture: the tokenizers' ids as diffusers' pipeline makes them
//! (the prompt and two more texts), and CLIP's pooled vector and T5's states in f32 against the
//! pipeline's recorded ones.

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use flux_df11::TextEncoders;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn encoders() -> TextEncoders {
    let r = common::reference_json();
    let length = r["max_sequence_length"].as_u64().unwrap() as usize;
    TextEncoders::load(
        &common::fixture().join("base"),
        &Device::Cpu,
        DType::F32,
        length,
    )
    .unwrap()
}

#[test]
fn token_ids_are_the_pipelines() {
    let r = common::reference_json();
    let enc = encoders();
    let (clip, t5) = enc.token_ids(r["prompt"].as_str().unwrap()).unwrap();
    assert_eq!(clip, ids(&r["tokens"]["clip"]["ids"]));
    assert_eq!(t5, ids(&r["tokens"]["t5"]["ids"]));
    for check in r["tokens"]["extra_checks"].as_array().unwrap() {
        let (clip, t5) = enc.token_ids(check["text"].as_str().unwrap()).unwrap();
        let want = ids(&check["clip_ids"]);
        assert_eq!(&clip[..want.len()], want.as_slice(), "{check}");
        // T5's ids as recorded (unpadded, untruncated); longer than the length, truncation
        // keeps the first tokens and the closing `</s>` (1), as the pipeline's does.
        let mut want = ids(&check["t5_ids"]);
        if want.len() > t5.len() {
            want.truncate(t5.len() - 1);
            want.push(1);
        }
        assert_eq!(&t5[..want.len()], want.as_slice(), "{check}");
    }
}

#[test]
fn encoder_outputs_match_the_pipelines() {
    let r = common::reference_json();
    let tensors: HashMap<String, Tensor> = candle_core::safetensors::load(
        common::fixture().join("reference.safetensors"),
        &Device::Cpu,
    )
    .unwrap();
    let mut enc = encoders();
    let (states, pooled) = enc.encode(r["prompt"].as_str().unwrap()).unwrap();
    let e_states = common::max_abs_diff(&states, &tensors["pipeline.f32.t5_hidden_states"]);
    let e_pooled = common::max_abs_diff(&pooled, &tensors["pipeline.f32.clip_pooled"]);
    eprintln!("T5 states {e_states:.3e}, CLIP pooled {e_pooled:.3e} from diffusers'");
    assert!(e_states <= 1e-5 && e_pooled <= 1e-5);
}

#[test]
fn a_base_without_clips_tokenizer_json_gives_the_same_ids() {
    // As the FLUX.1 repos ship it: vocab.json + merges.txt only.
    let tmp = tempfile::tempdir().unwrap();
    common::copy_dir(&common::fixture().join("base"), tmp.path());
    std::fs::remove_file(tmp.path().join("tokenizer/tokenizer.json")).unwrap();
    let r = common::reference_json();
    let length = r["max_sequence_length"].as_u64().unwrap() as usize;
    let enc = TextEncoders::load(tmp.path(), &Device::Cpu, DType::F32, length).unwrap();
    let (clip, _) = enc.token_ids(r["prompt"].as_str().unwrap()).unwrap();
    assert_eq!(clip, ids(&r["tokens"]["clip"]["ids"]));
    for check in r["tokens"]["extra_checks"].as_array().unwrap() {
        let (clip, _) = enc.token_ids(check["text"].as_str().unwrap()).unwrap();
        let want = ids(&check["clip_ids"]);
        assert_eq!(&clip[..want.len()], want.as_slice(), "{check}");
    }
}
