//! DF11 is lossless: the DF11 model and the BF16-loaded model, run by the same code on the same
//! device, give bit-identical logits, in f32 and in bf16 compute, at prefill and at decode steps.
//! The device is the CPU in CI and CUDA in the GPU suite (`common::test_device`).

mod common;

use candle_core::{DType, Tensor};
use common::*;
use df11_candle::{ModelWeights, WeightFormat};
use df11_llm::{CausalLm, LoadBar, ModelConfig};
use mistral_nemo_df11::{Mistral, MistralConfig};

fn bits(t: &Tensor) -> Vec<u32> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F32 => t
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|x| u32::from(x.to_bits()))
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    }
}

/// Logits of the prompt and of three decode steps.
fn run(model: &mut Mistral, prompt: &[u32]) -> Vec<Vec<u32>> {
    model.reset();
    let device = test_device();
    let mut out = vec![bits(&model.forward(&input_on(prompt, &device), 0).unwrap())];
    for (i, t) in [3u32, 141, 7].into_iter().enumerate() {
        out.push(bits(
            &model
                .forward(&input_on(&[t], &device), prompt.len() + i)
                .unwrap(),
        ));
    }
    out
}

fn open(name: &str, kind: &str, dtype: DType) -> (Mistral, ModelWeights) {
    let dir = model_dir(name, kind);
    let format = if kind == "df11" {
        WeightFormat::Df11
    } else {
        WeightFormat::Dense
    };
    let weights = ModelWeights::open(&dir, format, &test_device(), dtype).unwrap();
    let cfg = MistralConfig::from_model_config(&ModelConfig::open(&dir).unwrap()).unwrap();
    let model = Mistral::load(&cfg, &weights, &LoadBar::hidden()).unwrap();
    (model, weights)
}

#[test]
fn df11_logits_equal_bf16_logits_bit_for_bit() {
    for name in MODELS {
        let prompt = ids(&reference(name)["prompt_ids"]);
        for dtype in [DType::F32, DType::BF16] {
            let (mut df11, df11_weights) = open(name, "df11", dtype);
            let (mut bf16, bf16_weights) = open(name, "bf16", dtype);
            // The DF11 model really holds compressed units; the BF16 one none.
            assert!(df11_weights.loaded_unit_bytes() > 0, "{name}");
            assert_eq!(bf16_weights.loaded_unit_bytes(), 0, "{name}");
            let a = run(&mut df11, &prompt);
            let b = run(&mut bf16, &prompt);
            assert_eq!(a.len(), b.len());
            for (step, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    x == y,
                    "{name} {dtype:?}: step {step}: DF11 and BF16 logits differ"
                );
            }
            // The logits are not trivially equal (e.g. all zeros).
            assert!(a[0].iter().collect::<std::collections::HashSet<_>>().len() > 100);
        }
    }
}
