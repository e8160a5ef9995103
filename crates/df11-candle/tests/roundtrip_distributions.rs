//! Round trips `encode_unit` -> `UnitLayout::validate` -> `decode_sequential` / `decode_parallel`
//! on random BF16 data of many sizes and distributions, and on multi-member units, comparing
//! bytes exactly with the input (`common::roundtrip::roundtrip`).
//!
//! Every run draws fresh random seeds; each assertion message names the seed. To reproduce a
//! failure, run with `DF11_TEST_SEED=<seed>`.

mod common;

use common::roundtrip::*;
use common::seeded;
use df11_candle::{encode_unit, UnitDefect};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_distr::Distribution;

/// Sizes that are multiples of nothing in particular, plus block-sized ones.
const SIZES: [usize; 12] = [
    1, 2, 3, 7, 255, 1000, 4095, 4097, 12_345, 32_771, 65_537, 200_003,
];

#[test]
fn normal_weights_of_many_sizes() {
    let (seed, mut rng) = seeded("normal_weights_of_many_sizes");
    for &n in &SIZES {
        let w = normal(&mut rng, n, 0.0, 0.02);
        let (_, layout) = roundtrip(&[w], &format!("seed {seed}: N(0, 0.02) x {n}"));
        if n >= 100_000 {
            // Like real LLM weights: several LUT levels, codes well past 8 bits.
            assert!(
                layout.lut_rows >= 3,
                "seed {seed}: n {n}: K = {}",
                layout.lut_rows
            );
            assert!(layout.n_blocks >= 2, "seed {seed}: n {n}");
        }
    }
    // A larger one with a random odd size, about a million weights.
    let n = rng.gen_range(900_000..1_100_000) | 1;
    let w = normal(&mut rng, n, 0.0, 0.02);
    roundtrip(&[w], &format!("seed {seed}: N(0, 0.02) x {n}"));
}

#[test]
fn other_distributions() {
    let (seed, mut rng) = seeded("other_distributions");
    for &n in &[1usize, 5, 999, 50_001, 300_007] {
        // Norm weights, wide and narrow normals, subnormal-sized values and zeros.
        roundtrip(
            &[normal(&mut rng, n, 1.0, 0.1)],
            &format!("seed {seed}: 1 + 0.1 N x {n}"),
        );
        roundtrip(
            &[normal(&mut rng, n, 0.0, 1.0)],
            &format!("seed {seed}: N(0, 1) x {n}"),
        );
        roundtrip(
            &[normal(&mut rng, n, 0.0, 1e-3)],
            &format!("seed {seed}: N(0, 1e-3) x {n}"),
        );
        let tiny: Vec<u16> = (0..n)
            .map(|_| match rng.gen_range(0..4) {
                0 => 0,
                1 => 0x8000,
                _ => rng.gen::<u16>() & 0x80FF, // exponents 0 and 1
            })
            .collect();
        roundtrip(&[tiny], &format!("seed {seed}: zeros and subnormals x {n}"));
        // Raw random bits with every exponent below 240: codes of 7-9 bits everywhere.
        let uniform: Vec<u16> = (0..n)
            .map(|_| {
                let e = rng.gen_range(0..240u16) as u8;
                with_exponent(&mut rng, e)
            })
            .collect();
        let ctx = format!("seed {seed}: uniform exponents x {n}");
        if (100..10_000).contains(&n) {
            // A few counts per exponent give codes of 6-11 bits whose prefixes need more
            // than the 17 decode rows the format has: the encoder must say so, not panic.
            match encode_unit(&[&le_bytes(&uniform)]) {
                Ok(_) => {
                    roundtrip(&[uniform], &ctx);
                }
                Err(e) => assert!(e.reason.contains("decode tables"), "{ctx}: {e:?}"),
            }
        } else {
            roundtrip(&[uniform], &ctx);
        }
        // A random histogram over a random set of exponents.
        let k = rng.gen_range(3..40);
        let mut symbols: Vec<u8> = (0..240u8).collect();
        symbols.shuffle(&mut rng);
        symbols.truncate(k);
        let weights: Vec<f64> = (0..k).map(|_| rng.gen::<f64>().powi(4) + 1e-4).collect();
        let dist = rand::distributions::WeightedIndex::new(&weights).unwrap();
        let mixed: Vec<u16> = (0..n)
            .map(|_| {
                let e = symbols[dist.sample(&mut rng)];
                with_exponent(&mut rng, e)
            })
            .collect();
        roundtrip(
            &[mixed],
            &format!("seed {seed}: random histogram over {k} exponents x {n}"),
        );
    }
}

#[test]
fn multi_member_units() {
    let (seed, mut rng) = seeded("multi_member_units");
    // A Qwen3-like layer (q, k, v, o, gate, up, down) with a random small geometry.
    let hidden = 8 * rng.gen_range(4..24);
    let inter = 8 * rng.gen_range(8..48);
    let kv = hidden / 2;
    let shapes = [
        hidden * hidden,
        kv * hidden,
        kv * hidden,
        hidden * hidden,
        inter * hidden,
        inter * hidden,
        hidden * inter,
    ];
    let members: Vec<Vec<u16>> = shapes
        .iter()
        .map(|&n| normal(&mut rng, n, 0.0, 0.02))
        .collect();
    let ctx = format!("seed {seed}: layer hidden {hidden} inter {inter}");
    let (_, layout) = roundtrip(&members, &ctx);
    assert_eq!(layout.split_positions.len(), 6, "{ctx}");

    // Random member counts and odd sizes, each member with its own distribution, so a block
    // boundary or a split can fall anywhere.
    for trial in 0..12 {
        let m = rng.gen_range(1..9);
        let members: Vec<Vec<u16>> = (0..m)
            .map(|_| {
                let n = match rng.gen_range(0..3) {
                    0 => rng.gen_range(1..64),
                    1 => rng.gen_range(64..5000),
                    _ => rng.gen_range(5000..120_000),
                };
                let std = [0.02f32, 0.1, 1.0, 1e-3][rng.gen_range(0..4)];
                normal(&mut rng, n, 0.0, std)
            })
            .collect();
        let sizes: Vec<usize> = members.iter().map(Vec::len).collect();
        let ctx = format!("seed {seed}: trial {trial}: members {sizes:?}");
        let (_, layout) = roundtrip(&members, &ctx);
        // Wrong member sizes are refused.
        let mut wrong = sizes.clone();
        wrong[0] += 1;
        assert!(
            matches!(
                layout.check_members(&wrong),
                Err(UnitDefect::MemberSizes { .. })
            ),
            "{ctx}"
        );
        if m >= 2 {
            let mut shifted = sizes.clone();
            shifted[0] += 1;
            shifted[1] -= 1;
            if shifted[1] > 0 {
                assert!(
                    matches!(
                        layout.check_members(&shifted),
                        Err(UnitDefect::SplitPositions(_))
                    ),
                    "{ctx}"
                );
            }
        }
    }
}
