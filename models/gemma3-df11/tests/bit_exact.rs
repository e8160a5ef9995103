//! DF11 is lossless: the DF11 model and the BF16-loaded model, run by the same code on the same
//! device, give bit-identical logits, in f32 and in bf16 compute, at prefill and at decode steps.
//! The device is the CPU in CI and CUDA in the GPU suite (`df11_llm::testing::test_device`).

mod common;

#[test]
fn df11_logits_equal_bf16_logits_bit_for_bit() {
    df11_llm::testing::assert_df11_logits_equal_bf16::<gemma3_df11::Gemma3Arch>(&[common::NAME]);
}
