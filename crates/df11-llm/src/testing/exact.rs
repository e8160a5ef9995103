//! DF11 is lossless: the DF11 model and the BF16-loaded model, run by the same code on the same
//! device, give bit-identical logits. The device is the CPU in CI and CUDA in the GPU suite
//! ([`test_device`]).

use candle_core::DType;
use df11_candle::{ModelWeights, WeightFormat};

use super::{copy_fixture, text_config, ModelUnderTest};
use super::{ids, input, input_on, logit_bits, model_dir, reference, test_device};
use crate::{CausalLm, LoadBar, ModelConfig};

/// Logit bits of `prompt` and of three decode steps after it (from an empty cache).
fn prompt_and_steps<M: CausalLm>(model: &mut M, prompt: &[u32]) -> Vec<Vec<u32>> {
    model.reset();
    let device = test_device();
    let mut out = vec![logit_bits(
        &model.forward(&input_on(prompt, &device), 0).unwrap(),
    )];
    for (i, t) in [3u32, 141, 7].into_iter().enumerate() {
        let step = model.forward(&input_on(&[t], &device), prompt.len() + i);
        out.push(logit_bits(&step.unwrap()));
    }
    out
}

/// What every model crate checks to show DF11 is lossless: for each fixture in `models`, the DF11
/// folder and the BF16 folder, loaded by architecture `A` on [`test_device`] and run by the same
/// code, give bit-identical logits in f32 and in bf16 compute, at the prompt and at three decode
/// steps (on CUDA the steps take the fused kernel and its BF16 twin). The DF11 model must hold
/// compressed units, the BF16 one none, and the logits must not be trivially equal.
pub fn df11_logits_equal_bf16_logits_bit_for_bit(m: &ModelUnderTest) {
    let open = |name: &str, kind: &str, dtype: DType| {
        let dir = model_dir(name, kind);
        let format = if kind == "df11" {
            WeightFormat::Df11
        } else {
            WeightFormat::Dense
        };
        let weights = ModelWeights::open(&dir, format, &test_device(), dtype).unwrap();
        let config = ModelConfig::open(&dir).unwrap();
        let model = (m.build)(&config, &weights, &LoadBar::hidden()).unwrap();
        (model, weights.loaded_unit_bytes())
    };
    for name in m.fixtures {
        let prompt = ids(&reference(name)["prompt_ids"]);
        for dtype in [DType::F32, DType::BF16] {
            let (mut df11, df11_units) = open(name, "df11", dtype);
            let (mut bf16, bf16_units) = open(name, "bf16", dtype);
            assert!(
                df11_units > 0,
                "{name}: the DF11 model holds no compressed unit"
            );
            assert_eq!(bf16_units, 0, "{name}");
            let a = prompt_and_steps(&mut df11, &prompt);
            let b = prompt_and_steps(&mut bf16, &prompt);
            assert_eq!(a.len(), b.len());
            for (step, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    x == y,
                    "{name} {dtype:?}: step {step}: DF11 and BF16 logits differ"
                );
            }
            assert!(
                a[0].iter().collect::<std::collections::HashSet<_>>().len() > 100,
                "{name}: trivial logits"
            );
        }
    }
}

/// The output projection is tied or not as the config says, whatever the folder holds: an
/// untied fixture made tied uses its embedding (DF11 == BF16 still, and the logits change); a
/// tied fixture made untied needs an `lm_head` it does not have (a typed missing-tensor error).
pub fn tie_is_read_from_the_config(m: &ModelUnderTest) {
    for name in m.fixtures {
        let prompt = ids(&reference(name)["prompt_ids"]);
        let tied = m
            .load_fixture(name, "df11", DType::F32)
            .model
            .spec()
            .tie_word_embeddings;
        let flip = |c: &mut serde_json::Value| {
            text_config(c)["tie_word_embeddings"] = (!tied).into();
            c["tie_word_embeddings"] = (!tied).into();
        };
        let df11 = copy_fixture(&model_dir(name, "df11"), "", flip);
        let bf16 = copy_fixture(&model_dir(name, "bf16"), "", flip);
        if tied {
            match m.try_load(df11.path(), false, DType::F32) {
                Err(crate::LlmError::Df11(df11_candle::Df11Error::MissingTensor {
                    tensor,
                    ..
                })) => assert!(tensor.contains("lm_head"), "{name}: {tensor}"),
                Err(e) => panic!("{name} made untied: expected a missing lm_head, got {e}"),
                Ok(_) => panic!("{name} made untied loaded without an lm_head"),
            }
            continue;
        }
        let logits = |dir: &std::path::Path, bf16: bool| {
            let mut loaded = m.load_dir(dir, bf16, DType::F32);
            logit_bits(&loaded.model.forward(&input(&prompt), 0).unwrap())
        };
        let made_tied = logits(df11.path(), false);
        assert!(
            made_tied == logits(bf16.path(), true),
            "{name}: tied DF11 != tied BF16"
        );
        assert!(
            made_tied != logits(&model_dir(name, "df11"), false),
            "{name}: the tie was ignored"
        );
    }
}
