//! Synthetic BF16 weights for tests and benchmarks: LLM-like normal weights, and units built to
//! stress the decoders (32-bit codes with 4-level LUT chains, blocks with tens of thousands of
//! one-bit codes).

use half::bf16;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;

/// The member shapes `[out, in]` of a Qwen3-8B decoder layer unit (q, k, v, o, gate, up, down):
/// 192,937,984 weights.
pub const QWEN3_8B_LAYER: [(usize, usize); 7] = [
    (4096, 4096),
    (1024, 4096),
    (1024, 4096),
    (4096, 4096),
    (12288, 4096),
    (12288, 4096),
    (4096, 12288),
];

/// `n` BF16 weights drawn from N(0, std), reproducible from `seed` (parallel, chunked).
pub fn normal_bf16(n: usize, std: f32, seed: u64) -> Vec<bf16> {
    const CHUNK: usize = 1 << 16;
    let dist = Normal::new(0.0f32, std).expect("std > 0");
    let mut out = vec![bf16::ZERO; n];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(i, c)| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        for v in c {
            *v = bf16::from_f32(dist.sample(&mut rng));
        }
    });
    out
}

/// Weights whose exponent histogram follows Fibonacci counts over `symbols` exponents (plus
/// noise in sign and mantissa): the plain Huffman code is longer than 32 bits, so the length
/// limiter fires and the LUTs need four levels.
pub fn fibonacci_exponents(symbols: usize, seed: u64) -> Vec<bf16> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut a, mut b) = (1usize, 1usize);
    let mut out = Vec::new();
    for s in 0..symbols {
        let e = (90 + s) as u16;
        for _ in 0..a {
            let sm: u16 = rng.gen();
            out.push(bf16::from_bits((sm & 0x807F) | (e << 7)));
        }
        (a, b) = (b, a + b);
    }
    // Shuffle so long codes are spread through the stream.
    for i in (1..out.len()).rev() {
        let j = rng.gen_range(0..=i);
        out.swap(i, j);
    }
    out
}

/// `n` weights that almost all share one exponent (1-bit codes, tens of thousands of elements
/// per 4096-byte block), with a few others sprinkled in.
pub fn one_exponent_mostly(n: usize, seed: u64) -> Vec<bf16> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let sm: u16 = rng.gen();
            let e: u16 = if rng.gen_ratio(1, 5000) {
                rng.gen_range(100..130)
            } else {
                120
            };
            bf16::from_bits((sm & 0x807F) | (e << 7))
        })
        .collect()
}
