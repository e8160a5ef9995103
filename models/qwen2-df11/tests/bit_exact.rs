//! DF11 is lossless: the DF11 model and the BF16-loaded model, run by the same code on the same
//! device, give bit-identical logits, in f32 and in bf16 compute, at prefill and at decode steps.
//! The device is the CPU in CI and CUDA in the GPU suite (`df11_llm::testing::test_device`).

mod common;

use candle_core::DType;
use common::*;
use df11_llm::testing::logit_bits;
use df11_llm::CausalLm;

#[test]
fn df11_logits_equal_bf16_logits_bit_for_bit() {
    df11_llm::testing::assert_df11_logits_equal_bf16::<qwen2_df11::Qwen2Arch>(&common::MODELS);
}

#[test]
fn tie_is_read_from_the_config() {
    // The folders keep their lm_head, compressed or plain; with `tie_word_embeddings: true` the
    // model must use the embedding instead, from the DF11 and the BF16 folder alike.
    let name = MODELS[0];
    let prompt = ids(&reference(name)["prompt_ids"]);
    let tie = |v: &mut serde_json::Value| v["tie_word_embeddings"] = true.into();
    let df11_dir = copy_with_config(&model_dir(name, "df11"), tie);
    let bf16_dir = copy_with_config(&model_dir(name, "bf16"), tie);
    let logits = |dir: &std::path::Path, bf16: bool| {
        let mut loaded = df11_llm::load::<Arch>(&options(dir, bf16, DType::F32)).unwrap();
        logit_bits(&loaded.model.forward(&input(&prompt), 0).unwrap())
    };
    let tied = logits(df11_dir.path(), false);
    assert!(
        tied == logits(bf16_dir.path(), true),
        "{name}: tied DF11 != tied BF16"
    );
    assert!(
        tied != logits(&model_dir(name, "df11"), false),
        "{name}: tie ignored"
    );
}
