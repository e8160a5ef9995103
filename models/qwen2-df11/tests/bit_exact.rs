//! DF11 is lossless: the DF11 model and the BF16-loaded model, run by the same code on the same
//! device, give bit-identical logits, in f32 and in bf16 compute, at prefill and at decode steps.
//! The device is the CPU in CI and CUDA in the GPU suite (`common::test_device`).

mod common;

use candle_core::{DType, Tensor};
use common::*;
use df11_candle::{ModelWeights, WeightFormat};
use df11_llm::{Architecture, CausalLm, LoadBar, ModelConfig};

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
fn run(model: &mut Model, prompt: &[u32]) -> Vec<Vec<u32>> {
    model.reset();
    let device = test_device();
    let mut out = vec![bits(&model.forward(&input_on(prompt, &device), 0).unwrap())];
    for (i, t) in [3u32, 141, 7].into_iter().enumerate() {
        let step = model.forward(&input_on(&[t], &device), prompt.len() + i);
        out.push(bits(&step.unwrap()));
    }
    out
}

/// The model of fixture `name`/`kind` with its weights (to see what they hold).
fn open(name: &str, kind: &str, dtype: DType) -> (Model, ModelWeights) {
    let dir = model_dir(name, kind);
    let format = if kind == "df11" {
        WeightFormat::Df11
    } else {
        WeightFormat::Dense
    };
    let weights = ModelWeights::open(&dir, format, &test_device(), dtype).unwrap();
    let config = ModelConfig::open(&dir).unwrap();
    let model = Arch::load(&config, &weights, &LoadBar::hidden()).unwrap();
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
        bits(&loaded.model.forward(&input(&prompt), 0).unwrap())
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
