//! The decode step's CUDA kernels (`kernels/decode_step.cu`) and the greedy token on the device
//! against the eager formulas and the host's rule, on fresh random data: ragged rows (own
//! positions and cache slots), grouped-query heads, head sizes 32..256 and 48, sliding windows,
//! soft-capping, both q/k norm flavours, partial rotary. The prompt's attention is in
//! `prefill_kernels.rs`. Runs in the GPU suite (`--features cuda`); without CUDA this file has no
//! tests.
#![cfg(feature = "cuda")]

mod common;

use candle_core::{DType, Device, IndexOp, Module, Tensor};
use common::{cuda, f32s, randn, seed, Rng};
use df11_llm::ops::{add_rms_norm_bf16, flash_decode, qk_norm_rope_kv, HeadNorm};
use df11_llm::{apply_rope, default_inv_freq, RmsNorm, RotaryEmbedding};
use half::bf16;

/// Distinct slots and positions `< cap` for `rows` rows.
fn ragged(rows: usize, slots: usize, cap: usize, rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let mut all: Vec<usize> = (0..slots).collect();
    let mut chosen = Vec::new();
    for _ in 0..rows {
        chosen.push(all.remove(rng.below(all.len())));
    }
    let positions = (0..rows).map(|_| rng.below(cap)).collect();
    (chosen, positions)
}

fn u32_tensor(v: &[usize], dev: &Device) -> Tensor {
    let n = v.len();
    let v: Vec<u32> = v.iter().map(|&x| x as u32).collect();
    Tensor::from_vec(v, n, dev).unwrap()
}

#[test]
fn flash_decode_matches_attention_in_f64() {
    let dev = cuda();
    let mut rng = Rng(seed());
    // (rows, heads, kv_heads, head_dim, cap, window, softcap, splits)
    let cases = [
        (1, 32, 8, 128, 700, None, None, 33),
        (3, 4, 2, 32, 90, None, None, 4),
        (5, 8, 8, 64, 300, Some(17), None, 7),
        (2, 16, 2, 256, 200, None, Some(5.0f32), 3),
        (4, 4, 1, 48, 129, Some(40), None, 2),
        (2, 10, 2, 80, 77, None, None, 1),
        (3, 12, 1, 128, 64, None, None, 5),
        (2, 4, 2, 36, 50, None, None, 2),
    ];
    for (rows, heads, kv_heads, d, cap, window, softcap, splits) in cases {
        let slots_n = rows + 2;
        let (slots, positions) = ragged(rows, slots_n, cap, &mut rng);
        let q = randn(&[rows, heads, d], &dev);
        let kv = randn(&[2, slots_n, kv_heads, cap, d], &dev);
        let scale = 1.0 / (d as f32).sqrt();
        let got = flash_decode(
            &q,
            &kv,
            &u32_tensor(&positions, &dev),
            &u32_tensor(&slots, &dev),
            scale,
            softcap,
            window,
            splits,
            true,
        )
        .unwrap();
        assert_eq!(got.dims(), &[rows, heads * d]);
        let got = f32s(&got);
        let (qh, kvh) = (f32s(&q), f32s(&kv));
        let groups = heads / kv_heads;
        let mut worst = 0f64;
        for r in 0..rows {
            let len = positions[r] + 1;
            let lo = window.map_or(0, |w| len.saturating_sub(w));
            for h in 0..heads {
                let g = h / groups;
                let key = |part: usize, j: usize, e: usize| {
                    kvh[((((part * slots_n + slots[r]) * kv_heads + g) * cap) + j) * d + e] as f64
                };
                let scores: Vec<f64> = (lo..len)
                    .map(|j| {
                        let dot: f64 = (0..d)
                            .map(|e| qh[(r * heads + h) * d + e] as f64 * key(0, j, e))
                            .sum();
                        let s = dot * scale as f64;
                        match softcap {
                            Some(c) => c as f64 * (s / c as f64).tanh(),
                            None => s,
                        }
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                for e in 0..d {
                    let want: f64 = (lo..len)
                        .zip(&w)
                        .map(|(j, p)| p * key(1, j, e))
                        .sum::<f64>()
                        / sum;
                    let err = (got[(r * heads + h) * d + e] as f64 - want).abs();
                    worst = worst.max(err);
                }
            }
        }
        // BF16 inputs, scores rounded to BF16 as transformers does, BF16 output.
        assert!(
            worst < 3e-2,
            "case d={d} window={window:?}: max |err| {worst}"
        );
        eprintln!("d={d} heads={heads}/{kv_heads} splits={splits}: max |err| {worst:e}");
    }
}

#[test]
fn flash_decode_reads_only_its_slot_and_window() {
    // Values outside a row's keys (other slots, positions past it, keys left of the window) are
    // poisoned: the result must not change.
    let dev = cuda();
    let (rows, heads, kv_heads, d, cap, slots_n) = (2, 4, 2, 64, 50, 4);
    let q = randn(&[rows, heads, d], &dev);
    let clean = randn(&[2, slots_n, kv_heads, cap, d], &dev);
    let positions = [20usize, 9];
    let slots = [3usize, 1];
    let window = Some(6);
    let run = |kv: &Tensor| {
        f32s(
            &flash_decode(
                &q,
                kv,
                &u32_tensor(&positions, &dev),
                &u32_tensor(&slots, &dev),
                0.125,
                None,
                window,
                3,
                true,
            )
            .unwrap(),
        )
    };
    let want = run(&clean);
    let mut host = f32s(&clean);
    for part in 0..2 {
        for s in 0..slots_n {
            for h in 0..kv_heads {
                for j in 0..cap {
                    let row = slots.iter().position(|&x| x == s);
                    let keep = row.is_some_and(|r| j <= positions[r] && j + 6 > positions[r]);
                    if !keep {
                        for e in 0..d {
                            host[((((part * slots_n + s) * kv_heads + h) * cap) + j) * d + e] = 1e4;
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
}

#[test]
fn qk_norm_rope_kv_matches_the_eager_ops() {
    let dev = cuda();
    let mut rng = Rng(seed());
    // (rows, heads, kv_heads, head_dim, rotary dim, norm flavour: None, Some(one_plus))
    let cases = [
        (3, 8, 2, 128, 128, Some(false)),
        (2, 4, 4, 256, 256, Some(true)),
        (4, 6, 2, 48, 48, None),
        (1, 4, 2, 64, 32, None),
    ];
    for (rows, heads, kv_heads, d, rot, norm) in cases {
        let (cap, slots_n) = (40, rows + 1);
        let (slots, positions) = ragged(rows, slots_n, cap, &mut rng);
        let mut rope = RotaryEmbedding::new(default_inv_freq(1e4, rot), cap, DType::BF16, &dev);
        let (cos, sin) = rope.tables(0, cap).unwrap();
        let qkv = randn(&[rows, 1, (heads + 2 * kv_heads) * d], &dev);
        let q = qkv.narrow(2, 0, heads * d).unwrap();
        let k = qkv.narrow(2, heads * d, kv_heads * d).unwrap();
        let v = qkv.narrow(2, (heads + kv_heads) * d, kv_heads * d).unwrap();
        let w = (randn(&[d], &dev) * 0.1).unwrap();
        let norms = norm.map(|one_plus| {
            let n = if one_plus {
                RmsNorm::one_plus(&w, 1e-6).unwrap()
            } else {
                RmsNorm::new((w.clone() + 1.0).unwrap(), 1e-6).unwrap()
            };
            let f32w = n.weight().to_dtype(DType::F32).unwrap();
            (n, f32w, one_plus)
        });
        let kv = Tensor::zeros((2, slots_n, kv_heads, cap, d), DType::BF16, &dev).unwrap();
        let head_norms = norms.as_ref().map(|(_, w, one_plus)| {
            let n = HeadNorm {
                weight: w,
                one_plus: *one_plus,
            };
            (n, n)
        });
        let got = qk_norm_rope_kv(
            &q,
            &k,
            &v,
            head_norms,
            1e-6,
            &cos,
            &sin,
            &u32_tensor(&positions, &dev),
            &u32_tensor(&slots, &dev),
            &kv,
            heads,
            true,
        )
        .unwrap();
        assert_eq!(got.dims(), &[rows, heads, d]);
        for r in 0..rows {
            let p = positions[r];
            let (c, s) = (cos.narrow(0, p, 1).unwrap(), sin.narrow(0, p, 1).unwrap());
            let eager = |x: &Tensor, n: usize| {
                let x = x.i(r).unwrap().reshape((1, n, 1, d)).unwrap();
                let x = match &norms {
                    Some((norm, _, _)) => norm.forward(&x).unwrap(),
                    None => x,
                };
                apply_rope(&x, &c, &s).unwrap().reshape((n, d)).unwrap()
            };
            let steps = |a: &Tensor, b: &Tensor| -> i32 {
                let (a, b) = (a.to_vec2::<bf16>().unwrap(), b.to_vec2::<bf16>().unwrap());
                a.iter()
                    .flatten()
                    .zip(b.iter().flatten())
                    .map(|(x, y)| (x.to_bits() as i32 - y.to_bits() as i32).abs())
                    .max()
                    .unwrap()
            };
            // One BF16 step at most: the norm's f32 sum may round differently.
            let q_got = got.i(r).unwrap();
            assert!(steps(&q_got, &eager(&q, heads)) <= 1, "q row {r} d={d}");
            let k_got = kv.i((0, slots[r])).unwrap().i((.., p)).unwrap();
            assert!(steps(&k_got, &eager(&k, kv_heads)) <= 1, "k row {r} d={d}");
            let v_got = kv.i((1, slots[r])).unwrap().i((.., p)).unwrap();
            let v_want = v.i(r).unwrap().reshape((kv_heads, d)).unwrap();
            assert_eq!(steps(&v_got, &v_want), 0, "v row {r}");
        }
    }
}

#[test]
fn add_rms_norm_equals_add_then_norm_bit_for_bit() {
    let dev = cuda();
    for (rows, n) in [(1usize, 4096usize), (7, 160), (3, 5120)] {
        let x = randn(&[rows, 1, n], &dev);
        let h = randn(&[rows, 1, n], &dev);
        let w = ((randn(&[n], &dev) * 0.1).unwrap() + 1.0).unwrap();
        let residual = x.copy().unwrap();
        let normed = add_rms_norm_bf16(&residual, &h, &w, 1e-6, true).unwrap();
        let sum = (&x + &h).unwrap();
        let want = df11_llm::ops::rms_norm_bf16(&sum, &w, 1e-6, true).unwrap();
        assert_eq!(f32s(&residual), f32s(&sum), "residual {rows}x{n}");
        assert_eq!(f32s(&normed), f32s(&want), "normed {rows}x{n}");
    }
}

/// The greedy token on the device (`df11_llm::ops::argmax_last_dim`, through
/// `df11_llm::greedy_tokens`) equals the host's rule (first maximum, NaN on top, -0 == +0) on
/// random logits full of ties, with NaN, zeros of both signs and infinities planted: BF16 and
/// F32, vector and scalar paths (vocabularies that are and are not multiples of 8), several rows,
/// a view that is not contiguous.
#[test]
fn greedy_tokens_on_the_device_equal_the_host_rule() {
    let dev = cuda();
    let mut rng = Rng(seed());
    for (rows, vocab) in [
        (1, 151_936),
        (3, 1000),
        (2, 4097),
        (8, 262_208),
        (4, 1),
        (5, 33),
    ] {
        let mut values: Vec<f32> = (0..rows * vocab)
            .map(|_| (rng.below(41) as f32 - 20.0) / 4.0)
            .collect();
        for r in 0..rows {
            let row = &mut values[r * vocab..(r + 1) * vocab];
            match r % 4 {
                0 => row[rng.below(vocab)] = f32::NAN,
                1 => {
                    row.iter_mut().for_each(|v| *v = -v.abs() - 1.0);
                    row[rng.below(vocab)] = -0.0;
                    row[rng.below(vocab)] = 0.0;
                }
                2 => row[rng.below(vocab)] = f32::INFINITY,
                _ => {}
            }
        }
        let host = Tensor::from_vec(values, (rows, vocab), &Device::Cpu).unwrap();
        for dtype in [DType::BF16, DType::F32] {
            let h = host.to_dtype(dtype).unwrap();
            let want = df11_llm::greedy_tokens(&h).unwrap();
            let got = df11_llm::greedy_tokens(&h.to_device(&dev).unwrap()).unwrap();
            assert_eq!(got, want, "{rows} x {vocab} {dtype:?}");
            if vocab > 1 {
                let view = h.narrow(1, 1, vocab - 1).unwrap();
                let want = df11_llm::greedy_tokens(&view).unwrap();
                let on_dev = h.to_device(&dev).unwrap().narrow(1, 1, vocab - 1).unwrap();
                let got = df11_llm::greedy_tokens(&on_dev).unwrap();
                assert_eq!(got, want, "{rows} x {vocab} {dtype:?}, a view");
            }
        }
    }
}
