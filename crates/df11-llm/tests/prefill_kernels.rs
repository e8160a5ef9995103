//! The prompt's flash attention (`kernels/prefill_attention.cu`) against an f64 attention over
//! the cache, on fresh random data: several rows of a batch in their own cache slots, grouped-query
//! heads, head sizes up to 256, sliding windows, soft-capping; and that it reads only the keys a
//! query may see. Runs in the GPU suite (`--features cuda`); without CUDA this file has no tests.
#![cfg(feature = "cuda")]

mod common;

use candle_core::{DType, Device, Tensor};
use common::{cuda, f32s, randn, seed, Rng};
use df11_llm::ops::{prefill_attention, PromptAt};
use half::bf16;

/// `x` rounded to BF16.
fn bf16_round(x: f64) -> f64 {
    bf16::from_f64(x).to_f64()
}

/// The f64 attention of query `(row, token, head)` of a prompt (`q` `[rows * seq, heads, d]`)
/// over its slot's keys `[lo, p]`, p = start + token: the `d` outputs.
#[allow(clippy::too_many_arguments)]
fn prompt_attention_f64(
    qh: &[f32],
    kvh: &[f32],
    (heads, kv_heads, d): (usize, usize, usize),
    (slots_n, cap): (usize, usize),
    at: PromptAt,
    (row, token, head): (usize, usize, usize),
    scale: f32,
    softcap: Option<f32>,
    window: Option<usize>,
) -> Vec<f64> {
    let p = at.start + token;
    let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
    let g = head / (heads / kv_heads);
    let slot = at.first_slot + row;
    let key = |part: usize, j: usize, e: usize| {
        kvh[((((part * slots_n + slot) * kv_heads + g) * cap) + j) * d + e] as f64
    };
    let qrow = ((row * at.seq + token) * heads + head) * d;
    let scores: Vec<f64> = (lo..=p)
        .map(|j| {
            let dot: f64 = (0..d).map(|e| qh[qrow + e] as f64 * key(0, j, e)).sum();
            // The kernel's (and transformers' eager) rounding of the scores to BF16.
            let s = bf16_round(bf16_round(dot) * scale as f64);
            softcap.map_or(s, |c| c as f64 * (s / c as f64).tanh())
        })
        .collect();
    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
    let sum: f64 = w.iter().sum();
    (0..d)
        .map(|e| (lo..=p).zip(&w).map(|(j, p)| p * key(1, j, e)).sum::<f64>() / sum)
        .collect()
}

#[test]
fn prefill_attention_matches_attention_in_f64() {
    let dev = cuda();
    let mut rng = Rng(seed());
    // (rows, seq, start, heads, kv_heads, head_dim, window, softcap): grouped heads (1 to 5
    // query heads a kv head), every kernel width (64, 128, 256 padded), chunks after a start,
    // sliding windows, soft-capping, prompts not a multiple of the tiles.
    let cases = [
        (1, 300, 0, 32, 8, 128, None, None),
        (2, 37, 5, 4, 2, 32, None, None),
        (3, 70, 20, 5, 1, 32, Some(17), None),
        (2, 33, 0, 16, 2, 256, None, Some(5.0f32)),
        (1, 65, 3, 4, 2, 48, Some(40), None),
        (2, 50, 10, 10, 2, 80, None, None),
        (1, 130, 0, 8, 8, 64, None, None),
        (2, 20, 0, 4, 4, 8, None, None),
        (1, 1, 0, 6, 3, 200, None, None),
    ];
    for (rows, seq, start, heads, kv_heads, d, window, softcap) in cases {
        let slots_n = rows + 2;
        let first_slot = rng.below(3);
        let cap = start + seq + rng.below(20);
        let q = randn(&[rows * seq, heads, d], &dev);
        let kv = randn(&[2, slots_n.max(first_slot + rows), kv_heads, cap, d], &dev);
        let slots_n = kv.dim(1).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        let at = PromptAt {
            rows,
            seq,
            first_slot,
            start,
        };
        let got = prefill_attention(&q, &kv, at, scale, softcap, window).unwrap();
        assert_eq!(got.dims(), &[rows * seq, heads * d]);
        let got = f32s(&got);
        let (qh, kvh) = (f32s(&q), f32s(&kv));
        let (mut worst, mut total, mut count) = (0f64, 0f64, 0usize);
        for row in 0..rows {
            for token in 0..seq {
                for head in 0..heads {
                    let want = prompt_attention_f64(
                        &qh,
                        &kvh,
                        (heads, kv_heads, d),
                        (slots_n, cap),
                        at,
                        (row, token, head),
                        scale,
                        softcap,
                        window,
                    );
                    let base = ((row * seq + token) * heads + head) * d;
                    for (e, w) in want.iter().enumerate() {
                        let err = (got[base + e] as f64 - w).abs();
                        worst = worst.max(err);
                        total += err;
                        count += 1;
                    }
                }
            }
        }
        // Scores rounded as the reference does (a score may still land one BF16 step away: the
        // tensor cores sum q.k in another order), probabilities rounded to BF16 for the values,
        // BF16 output: a bound on the largest error, and a tighter one on the mean, which a
        // wrong mask or a missed key moves.
        let mean = total / count as f64;
        eprintln!(
            "prefill d={d} heads={heads}/{kv_heads} seq={seq}: max |err| {worst:e}, mean {mean:e}"
        );
        assert!(
            worst < 3e-2 && mean < 2e-3,
            "case d={d} seq={seq} window={window:?}: max |err| {worst}, mean {mean}"
        );
    }
}

#[test]
fn prefill_attention_reads_only_visible_keys() {
    // Keys and values no query of a row sees (other slots, positions past the prompt, left of
    // the first query's window) are NaN: the result must not change.
    let dev = cuda();
    let (rows, seq, start, heads, kv_heads, d, cap, slots_n) = (2, 40, 20, 8, 2, 64, 90, 5);
    let at = PromptAt {
        rows,
        seq,
        first_slot: 2,
        start,
    };
    let window = Some(9);
    let q = randn(&[rows * seq, heads, d], &dev);
    let clean = randn(&[2, slots_n, kv_heads, cap, d], &dev);
    let run = |kv: &Tensor| f32s(&prefill_attention(&q, kv, at, 0.125, None, window).unwrap());
    let want = run(&clean);
    assert!(want.iter().all(|x| x.is_finite()));
    let mut host = f32s(&clean);
    let lowest = start + 1 - 9; // the first query's window: positions 12..=20
    for part in 0..2 {
        for s in 0..slots_n {
            for h in 0..kv_heads {
                for j in 0..cap {
                    let ours = (2..2 + rows).contains(&s);
                    if !ours || j < lowest || j >= start + seq {
                        for e in 0..d {
                            host[((((part * slots_n + s) * kv_heads + h) * cap) + j) * d + e] =
                                f32::NAN;
                        }
                    }
                }
            }
        }
    }
    let poisoned = Tensor::from_vec(host, clean.dims(), &Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
        .to_device(&dev)
        .unwrap();
    assert_eq!(run(&poisoned), want);
    // Prompts outside the cache are refused before any launch.
    let past = PromptAt {
        start: cap - seq + 1,
        ..at
    };
    assert!(prefill_attention(&q, &clean, past, 0.125, None, None).is_err());
    let slots = PromptAt {
        first_slot: slots_n - 1,
        ..at
    };
    assert!(prefill_attention(&q, &clean, slots, 0.125, None, None).is_err());
    let odd = randn(&[rows * seq, heads, 36], &dev);
    let kv36 = randn(&[2, slots_n, kv_heads, cap, 36], &dev);
    assert!(prefill_attention(&odd, &kv36, at, 0.125, None, None).is_err());
}
