//! DF11 is lossless: the DF11 model and the BF16-loaded model, run by the same code on the same
//! device, give bit-identical logits. The device is the CPU in CI and CUDA in the GPU suite
//! ([`test_device`]).

use candle_core::DType;
use df11_candle::WeightFormat;

use super::{copy_fixture, text_config, ModelUnderTest};
use super::{ids, input, input_on, logit_bits, model_dir, reference, test_device};
use crate::{CausalLm, DecodeOptions, DecoderModel, ModelConfig, PromptAttention};

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
        let weights = m.open_weights(&dir, format, &test_device(), dtype);
        let config = ModelConfig::open(&dir).unwrap();
        let model = m.built(&config, &weights).unwrap();
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

/// Logits of `prompt` and of one decode step for each of `then` (fed whatever the logits say,
/// so every run sees the same tokens).
fn step_logits(model: &mut DecoderModel, prompt: &[u32], then: &[u32]) -> Vec<Vec<f32>> {
    let device = test_device();
    model.reset();
    let f32s = |t: candle_core::Tensor| -> Vec<f32> {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let mut out = vec![f32s(model.forward(&input_on(prompt, &device), 0).unwrap())];
    for (i, &t) in then.iter().enumerate() {
        let logits = model.forward(&input_on(&[t], &device), prompt.len() + i);
        out.push(f32s(logits.unwrap()));
    }
    out
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (*x as f64 - *y as f64).abs())
        .fold(0.0, f64::max)
}

/// The ways a decode step can run agree: a captured CUDA graph and separate launches bit for
/// bit; the step kernels (BF16), and the prompt's attention in place (the flash-attention and
/// the flash-decoding kernels, [`DecodeOptions::prompt_attention`]), no further from the f32
/// eager pass than the BF16 eager
/// pass is (at most 2x its largest difference, + 1e-3), over the prompt and 8 decode steps fed
/// the reference's greedy tokens. On the CPU every way is the eager pass. DF11 weights, on
/// [`test_device`].
pub fn decode_paths_agree(m: &ModelUnderTest) {
    let device = test_device();
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };
    for name in m.fixtures {
        let r = reference(name);
        let prompt = ids(&r["prompt_ids"]);
        let then: Vec<u32> = ids(&r["greedy"]["tokens"]).into_iter().take(8).collect();
        let dir = model_dir(name, "df11");
        let config = ModelConfig::open(&dir).unwrap();
        let open = |dtype: DType| {
            let weights = m.open_weights(&dir, WeightFormat::Df11, &device, dtype);
            m.built(&config, &weights).unwrap()
        };
        let run = |model: &mut DecoderModel,
                   cuda_graph: bool,
                   step_kernels: bool,
                   prompt_attention: PromptAttention| {
            let options = DecodeOptions {
                max_context: Some(prompt.len() + then.len() + 1),
                cuda_graph,
                step_kernels,
                prompt_attention,
                ..m.decode.clone()
            };
            model.set_options(options).unwrap();
            step_logits(model, &prompt, &then)
        };
        let mut model = open(dtype);
        use PromptAttention::{Flash, FlashDecoding, Matmul};
        let graph = run(&mut model, true, true, Matmul);
        let launches = run(&mut model, false, true, Matmul);
        let eager = run(&mut model, false, false, Matmul);
        let flash_decoding = run(&mut model, true, true, FlashDecoding);
        // The option must take the in-place path wherever the step kernels run (CUDA, BF16).
        let expect = if device.is_cuda() {
            FlashDecoding
        } else {
            Matmul
        };
        assert_eq!(
            model.prompt_attention(),
            expect,
            "{name}: flash-decoding set"
        );
        let flash = run(&mut model, true, true, Flash);
        // The flash kernel takes every fixture's head size on the GPUs the suite runs on.
        let expect = if device.is_cuda() { Flash } else { Matmul };
        assert_eq!(model.prompt_attention(), expect, "{name}: flash set");
        let exact = run(&mut open(DType::F32), false, false, Matmul);
        for (step, (a, b)) in graph.iter().zip(&launches).enumerate() {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{name}: step {step}: the graph and separate launches differ"
            );
        }
        let (kernels_err, eager_err) = (max_diff(&graph, &exact), max_diff(&eager, &exact));
        let flash_decoding_err = max_diff(&flash_decoding, &exact);
        let flash_err = max_diff(&flash, &exact);
        eprintln!(
            "{name}: vs f32: step kernels {kernels_err:e}, eager {eager_err:e}, \
             flash-decoding prompt {flash_decoding_err:e}, flash prompt {flash_err:e}"
        );
        assert!(
            kernels_err <= 2.0 * eager_err + 1e-3,
            "{name}: the step kernels are {kernels_err} from f32, the eager pass {eager_err}"
        );
        assert!(
            flash_decoding_err <= 2.0 * eager_err + 1e-3,
            "{name}: the prompt through flash-decoding is {flash_decoding_err} from f32, the \
             eager pass {eager_err}"
        );
        assert!(
            flash_err <= 2.0 * eager_err + 1e-3,
            "{name}: the prompt through the flash kernel is {flash_err} from f32, the eager \
             pass {eager_err}"
        );
    }
}

/// Decoding each layer's units ahead on a second stream ([`DecodeOptions::decode_ahead`]) gives
/// the logits of decoding each weight at its product and of the BF16 original, bit for bit, over a prompt long enough
/// for decode + cuBLAS (the fixture's prompt repeated to at least 40 tokens) and three decode
/// steps. On CUDA the units must have been decoded ahead (resident, packed form); on the CPU
/// the option does nothing and both runs take the same path.
pub fn decode_ahead_is_exact(m: &ModelUnderTest) {
    let device = test_device();
    let name = m.fixtures[0];
    let (base, config, weights) = m.open_df11(name, &device);
    let prompt: Vec<u32> = base
        .iter()
        .cycle()
        .take(40.max(base.len()))
        .copied()
        .collect();
    let mut model = m.built(&config, &weights).unwrap();
    let mut run = |ahead: bool| {
        let options = DecodeOptions {
            max_context: Some(prompt.len() + 4),
            decode_ahead: ahead,
            ..m.decode.clone()
        };
        model.set_options(options).unwrap();
        prompt_and_steps(&mut model, &prompt)
    };
    let plain = run(false);
    let ahead = run(true);
    for (step, (a, b)) in plain.iter().zip(&ahead).enumerate() {
        assert!(
            a == b,
            "{name}: step {step}: decode-ahead changed the logits"
        );
    }
    // And the BF16 original, run the same way, gives those logits too.
    let dir = model_dir(name, "bf16");
    let bf16 = m.open_weights(&dir, WeightFormat::Dense, &device, weights.dtype());
    let mut original = m.built(&ModelConfig::open(&dir).unwrap(), &bf16).unwrap();
    original
        .set_options(DecodeOptions {
            max_context: Some(prompt.len() + 4),
            ..m.decode.clone()
        })
        .unwrap();
    assert!(
        prompt_and_steps(&mut original, &prompt) == ahead,
        "{name}: DF11 with decode-ahead != the BF16 original"
    );
    let decoded = model.units_decoded_ahead();
    if device.is_cuda() {
        assert!(decoded > 0, "{name}: no unit was decoded ahead");
    } else {
        assert_eq!(decoded, 0, "{name}: decode-ahead on the CPU");
    }
}

/// Sequences give the same logits, bit for bit, whether they run alone or joined in a ragged
/// batch (different prompt lengths, joining at different steps, rows in any order, one leaving
/// early) in an engine warmed up first: the engine's rows are independent. On [`test_device`] (up to 3 rows, where CUDA's
/// linears take the fused kernels).
pub fn engine_batches_equal_single_runs(m: &ModelUnderTest) {
    use crate::engine::{Engine, SeqId};
    let device = test_device();
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };
    let name = m.fixtures[0];
    let prompt = ids(&reference(name)["prompt_ids"]);
    let prompts = [
        prompt.clone(),
        prompt[..prompt.len() / 2].to_vec(),
        prompt[3..].to_vec(),
    ];
    let dir = model_dir(name, "df11");
    let config = ModelConfig::open(&dir).unwrap();
    let engine = || {
        let weights = m.open_weights(&dir, WeightFormat::Df11, &device, dtype);
        let mut model = m.built(&config, &weights).unwrap();
        let options = DecodeOptions {
            max_context: Some(prompt.len() + 16),
            ..m.decode.clone()
        };
        model.set_options(options).unwrap();
        Engine::new(model, 4).unwrap()
    };
    let argmax = |t: &candle_core::Tensor| -> u32 {
        t.argmax(candle_core::D::Minus1)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap()
    };
    const STEPS: usize = 6;
    // Alone: prompt logits, then STEPS greedy steps.
    let mut alone = Vec::new();
    for p in &prompts {
        let mut e = engine();
        let (seq, mut logits) = e.add(p).unwrap();
        let mut bits = vec![logit_bits(&logits)];
        for _ in 0..STEPS {
            logits = e
                .step(&[(seq, argmax(&logits))])
                .unwrap()
                .squeeze(0)
                .unwrap();
            bits.push(logit_bits(&logits));
        }
        alone.push(bits);
    }
    // Together: sequence i joins before step i; rows in a rotating order; each leaves after its
    // STEPS steps. This engine was warmed up first (Engine::warm_up): it must leave no trace.
    let mut e = engine();
    e.warm_up().unwrap();
    assert_eq!(e.running(), 0);
    let mut running: Vec<(usize, SeqId, u32, usize)> = Vec::new(); // (which, seq, next, steps)
    let mut together: Vec<Vec<Vec<u32>>> = vec![Vec::new(); prompts.len()];
    for round in 0.. {
        if round < prompts.len() {
            let (seq, logits) = e.add(&prompts[round]).unwrap();
            together[round].push(logit_bits(&logits));
            running.push((round, seq, argmax(&logits), 0));
        }
        if running.is_empty() {
            break;
        }
        let shift = round % running.len();
        running.rotate_left(shift);
        let batch: Vec<(SeqId, u32)> = running.iter().map(|r| (r.1, r.2)).collect();
        let logits = e.step(&batch).unwrap();
        for (i, r) in running.iter_mut().enumerate() {
            let row = logits.get(i).unwrap();
            together[r.0].push(logit_bits(&row));
            r.2 = argmax(&row);
            r.3 += 1;
        }
        for r in running.iter().filter(|r| r.3 == STEPS) {
            e.remove(r.1);
        }
        running.retain(|r| r.3 < STEPS);
    }
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.len(), b.len(), "{name}: sequence {i}");
        for (step, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                x == y,
                "{name}: sequence {i}, step {step}: alone != batched"
            );
        }
    }
    assert_eq!(e.running(), 0);
}
