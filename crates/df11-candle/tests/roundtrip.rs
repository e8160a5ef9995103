//! Round trips `encode_unit` -> `UnitLayout::validate` -> `decode_sequential` / `decode_parallel`
//! on random BF16 data, comparing bytes exactly with the input.
//!
//! Every run draws fresh random seeds; each assertion message names the seed. To reproduce a
//! failure, run with `DF11_TEST_SEED=<seed>`.

mod common;

use std::collections::HashMap;

use df11_candle::huffman::{CodeTable, MAX_CODE_LENGTH};
use df11_candle::{
    compress_model, decode_parallel, decode_sequential, encode_unit, CompressOptions, DecodeTable,
    Df11Error, EncodedUnit, RawTensor, UnitDefect, UnitLayout,
};
use half::bf16;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use safetensors::Dtype;

/// A fresh seed per test (or `DF11_TEST_SEED` to replay one), printed so it shows with a failure.
fn seeded(test: &str) -> (u64, StdRng) {
    let seed = std::env::var("DF11_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("{test}: seed {seed} (replay with DF11_TEST_SEED={seed})");
    (seed, StdRng::seed_from_u64(seed))
}

fn exponent(w: u16) -> u8 {
    (w >> 7) as u8
}

/// BF16 from an exponent and random sign and mantissa bits.
fn with_exponent(rng: &mut impl Rng, e: u8) -> u16 {
    (rng.gen::<u16>() & 0x807F) | ((e as u16) << 7)
}

fn normal(rng: &mut impl Rng, n: usize, mean: f32, std: f32) -> Vec<u16> {
    let d = Normal::new(mean, std).unwrap();
    (0..n)
        .map(|_| bf16::from_f32(d.sample(rng)).to_bits())
        .collect()
}

fn le_bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Encodes `members`, validates, checks every structural fact of the layout, decodes with both
/// decoders and compares them bytewise with the input. Returns the unit and its layout.
fn roundtrip(members: &[Vec<u16>], ctx: &str) -> (EncodedUnit, UnitLayout) {
    let bytes: Vec<Vec<u8>> = members.iter().map(|m| le_bytes(m)).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let enc = encode_unit(&refs).unwrap_or_else(|e| panic!("{ctx}: encode_unit failed: {e:?}"));
    let t = enc.tensors();
    let layout =
        UnitLayout::validate(&t).unwrap_or_else(|d| panic!("{ctx}: validation failed: {d}"));

    // Sizes and index data.
    let sizes: Vec<usize> = members.iter().map(Vec::len).collect();
    let n: usize = sizes.iter().sum();
    assert_eq!(layout.n_elements, n, "{ctx}");
    assert_eq!(enc.sign_mantissa.len(), n, "{ctx}");
    assert_eq!(layout.n_bytes, enc.encoded_exponent.len(), "{ctx}");
    assert_eq!(layout.n_blocks, layout.n_bytes.div_ceil(4096), "{ctx}");
    assert_eq!(enc.gaps.len(), 320 * layout.n_blocks, "{ctx}: gaps length");
    assert_eq!(layout.output_positions.len(), layout.n_blocks + 1, "{ctx}");
    assert!(
        [4 * layout.n_blocks, 4 * (layout.n_blocks + 1)].contains(&enc.output_positions.len()),
        "{ctx}: {} output_positions bytes for {} blocks",
        enc.output_positions.len(),
        layout.n_blocks
    );
    assert_eq!(layout.lut_rows, enc.lut_rows(), "{ctx}");
    assert!(
        (2..=18).contains(&layout.lut_rows),
        "{ctx}: K = {}",
        layout.lut_rows
    );
    assert!(layout.max_block_elements <= 32768, "{ctx}");

    // Members: split positions are the cumulative sizes, and the ranges tile the unit.
    let mut cum = 0;
    let expected_splits: Vec<usize> = sizes[..sizes.len().saturating_sub(1)]
        .iter()
        .map(|s| {
            cum += s;
            cum
        })
        .collect();
    assert_eq!(
        layout.split_positions, expected_splits,
        "{ctx}: split_positions"
    );
    assert_eq!(
        enc.split_positions.len(),
        8 * expected_splits.len(),
        "{ctx}"
    );
    let ranges = layout.member_ranges();
    assert_eq!(ranges.len(), members.len().max(1), "{ctx}: member ranges");
    for (i, r) in ranges.iter().enumerate().take(members.len()) {
        assert_eq!(r.len(), sizes[i], "{ctx}: member {i} range {r:?}");
    }
    layout
        .check_members(&sizes)
        .unwrap_or_else(|d| panic!("{ctx}: check_members: {d}"));

    // The code: every symbol present has a length of 1..=32, and the longest one is what the
    // layout reports (so it is reachable through the LUT chain).
    let lengths = &enc.luts[enc.luts.len() - 256..];
    let mut present = [false; 256];
    for m in members {
        for &w in m {
            present[exponent(w) as usize] = true;
        }
    }
    for (e, &p) in present.iter().enumerate() {
        if p {
            assert!(
                (1..=MAX_CODE_LENGTH as u8).contains(&lengths[e]),
                "{ctx}: exponent {e} has code length {}",
                lengths[e]
            );
        }
    }
    let longest = (0..256)
        .filter(|&e| present[e])
        .map(|e| lengths[e])
        .max()
        .unwrap_or(0);
    assert_eq!(layout.max_code_length, longest, "{ctx}: max code length");

    // Sign/mantissa bytes are as the format defines them.
    let flat: Vec<u16> = members.concat();
    for (i, (&w, &sm)) in flat.iter().zip(&enc.sign_mantissa).enumerate() {
        assert_eq!(
            sm,
            (((w >> 8) & 0x80) | (w & 0x7F)) as u8,
            "{ctx}: sign_mantissa[{i}]"
        );
    }

    // Both decoders reproduce the input exactly.
    let expected = le_bytes(&flat);
    let table = DecodeTable::new(&enc.luts);
    for (name, parallel) in [("sequential", false), ("parallel", true)] {
        let mut out = vec![bf16::from_bits(0xFFFF); n];
        let r = if parallel {
            decode_parallel(&t, &layout, &table, &mut out)
        } else {
            decode_sequential(&t, &layout, &table, &mut out)
        };
        r.unwrap_or_else(|d| panic!("{ctx}: {name} decoder failed: {d}"));
        let got: &[u8] = bytemuck::cast_slice(&out);
        if got != expected.as_slice() {
            let i = got
                .chunks_exact(2)
                .zip(expected.chunks_exact(2))
                .position(|(a, b)| a != b)
                .unwrap();
            panic!(
                "{ctx}: {name} decoder differs at element {i}: got 0x{:04x}, expected 0x{:04x}",
                out[i].to_bits(),
                flat[i]
            );
        }
    }
    (enc, layout)
}

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

#[test]
fn a_single_exponent() {
    let (seed, mut rng) = seeded("a_single_exponent");
    for &n in &[1usize, 2, 9, 4096, 32_768, 32_769, 100_001] {
        let e = rng.gen_range(0..240u16) as u8;
        let w: Vec<u16> = (0..n).map(|_| with_exponent(&mut rng, e)).collect();
        let ctx = format!("seed {seed}: exponent {e} x {n}");
        let (enc, layout) = roundtrip(&[w], &ctx);
        // One symbol (and dahuffman's EOF): a one-bit code, a single decode row.
        assert_eq!(layout.lut_rows, 2, "{ctx}");
        assert_eq!(layout.max_code_length, 1, "{ctx}");
        assert_eq!(enc.encoded_exponent.len(), n.div_ceil(8).max(1), "{ctx}");
    }
}

#[test]
fn exactly_two_symbols() {
    let (seed, mut rng) = seeded("exactly_two_symbols");
    for &n in &[2usize, 3, 17, 8191, 70_001] {
        let mut pair: Vec<u8> = (0..240u8).collect();
        pair.shuffle(&mut rng);
        let (a, b) = (pair[0], pair[1]);
        // Anything from a single `b` to an even split.
        let n_b = rng.gen_range(1..=n / 2);
        let mut w: Vec<u16> = (0..n)
            .map(|i| with_exponent(&mut rng, if i < n_b { b } else { a }))
            .collect();
        w.shuffle(&mut rng);
        let ctx = format!("seed {seed}: exponents {a} x {} and {b} x {n_b}", n - n_b);
        let (_, layout) = roundtrip(&[w], &ctx);
        assert_eq!(layout.lut_rows, 2, "{ctx}");
        assert!((1..=2).contains(&layout.max_code_length), "{ctx}");
    }
}

#[test]
fn one_element() {
    let (seed, mut rng) = seeded("one_element");
    let mut values: Vec<u16> = vec![
        0x0000, // +0
        0x8000, // -0
        0x0001, // smallest subnormal
        0x3F80, // 1.0
        0xBF80, // -1.0
        0x77FF, // largest value with exponent 239
        0xF780, // -2^112
    ];
    values.extend((0..20).map(|_| {
        let e = rng.gen_range(0..240u16) as u8;
        with_exponent(&mut rng, e)
    }));
    for v in values {
        let ctx = format!("seed {seed}: one element 0x{v:04x}");
        let (enc, layout) = roundtrip(&[vec![v]], &ctx);
        assert_eq!(enc.encoded_exponent.len(), 1, "{ctx}");
        assert_eq!(layout.n_blocks, 1, "{ctx}");
        assert_eq!(layout.output_positions, vec![0, 1], "{ctx}");
        // Also as the one non-empty member next to nothing else.
        roundtrip(&[vec![v], vec![v ^ 0x8000]], &ctx);
    }
}

/// Units with no element, or with an empty member, are not valid DF11 units (split positions
/// must increase strictly; a code needs a symbol). The encoder must not panic on them, and
/// whatever it produces must be refused by validation rather than mis-decoded.
#[test]
fn empty_members_are_refused_not_mis_encoded() {
    let (seed, mut rng) = seeded("empty_members_are_refused_not_mis_encoded");
    let a = le_bytes(&normal(&mut rng, 1000, 0.0, 0.02));
    let b = le_bytes(&normal(&mut rng, 77, 0.0, 0.02));
    let cases: [(&str, Vec<&[u8]>); 5] = [
        ("no members", vec![]),
        ("one empty member", vec![&[]]),
        ("empty first member", vec![&[], &a]),
        ("empty middle member", vec![&a, &[], &b]),
        ("empty last member", vec![&a, &b, &[]]),
    ];
    for (what, members) in cases {
        let ctx = format!("seed {seed}: {what}");
        match encode_unit(&members) {
            Err(e) => assert!(!e.reason.is_empty(), "{ctx}"),
            Ok(enc) => {
                let r = UnitLayout::validate(&enc.tensors());
                assert!(r.is_err(), "{ctx}: an invalid unit validated: {r:?}");
            }
        }
    }
    // Members of odd byte length are refused, naming the member.
    let odd = [0u8; 3];
    let e = encode_unit(&[&a, &odd]).unwrap_err();
    assert_eq!(e.member, Some(1), "seed {seed}: {e:?}");
}

/// Fibonacci-like counts make dahuffman's code longer than 32 bits, so the official 32-bit
/// limiter must fire; the limited code needs 4-level LUT chains.
#[test]
fn skewed_histogram_triggers_the_32_bit_limiter() {
    let (seed, mut rng) = seeded("skewed_histogram_triggers_the_32_bit_limiter");
    // Counts 2, 2, 4, 6, 10, ... (twice Fibonacci) make dahuffman's tree a chain whatever
    // exponent gets which count: each merged node weighs one less than the next count, so no
    // tie (whose outcome depends on the exponents' order) can break the chain. 33 exponents
    // (about 18 M elements) are the fewest that give a code longer than 32 bits.
    let (mut a, mut b) = (1u64, 1u64);
    let mut counts: Vec<u64> = Vec::new();
    while CodeTable::dahuffman(&pairs(&counts)).max_length() <= 32 {
        assert!(counts.len() < 40, "seed {seed}: no chain");
        counts.push(2 * a);
        (a, b) = (b, a + b);
    }
    // Assign the counts to a random run of exponents in a random order.
    let k = counts.len();
    let base = rng.gen_range(0..=(240 - k)) as u8;
    let mut symbols: Vec<u8> = (0..k as u8).map(|i| base + i).collect();
    symbols.shuffle(&mut rng);
    let mut w: Vec<u16> = Vec::with_capacity(counts.iter().sum::<u64>() as usize);
    for (&s, &c) in symbols.iter().zip(&counts) {
        for _ in 0..c {
            w.push(with_exponent(&mut rng, s));
        }
    }
    w.shuffle(&mut rng);
    let n = w.len();
    let ctx = format!("seed {seed}: {k} exponents from {base}, {n} elements");

    // The histogram as encode_unit sees it (ascending exponents).
    let mut hist: HashMap<u8, u64> = HashMap::new();
    for &x in &w {
        *hist.entry(exponent(x)).or_default() += 1;
    }
    let mut sorted: Vec<(u8, u64)> = hist.into_iter().collect();
    sorted.sort();
    let raw = CodeTable::dahuffman(&sorted);
    assert!(
        raw.max_length() > 32,
        "{ctx}: raw code is {} bits",
        raw.max_length()
    );
    let limited = CodeTable::length_limited(&sorted);
    assert!(limited.max_length() <= 32, "{ctx}");

    // Split into two members at a random point, to also cross a split with long codes.
    let cut = rng.gen_range(1..n);
    let second = w.split_off(cut);
    let (enc, layout) = roundtrip(&[w, second], &ctx);
    eprintln!(
        "{ctx}: raw code {} bits, limited {} bits, K = {}",
        raw.max_length(),
        layout.max_code_length,
        layout.lut_rows
    );
    assert!(
        layout.lut_rows >= 5,
        "{ctx}: K = {} (4-level chains need >= 5)",
        layout.lut_rows
    );
    // 33 chained exponents, the two rarest limited to count 1: the limit is reached exactly.
    assert_eq!(layout.max_code_length as u32, MAX_CODE_LENGTH, "{ctx}");
    // The longest code of the limited codebook (an exponent, not EOF) is in the data and is
    // exactly the longest length the LUTs can produce.
    let (lens, _) = limited.by_exponent();
    let longest = *lens.iter().max().unwrap();
    assert_eq!(layout.max_code_length, longest, "{ctx}");
    assert_eq!(
        &enc.luts[enc.luts.len() - 256..],
        &lens[..],
        "{ctx}: length row"
    );
}

fn pairs(counts: &[u64]) -> Vec<(u8, u64)> {
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| (i as u8, c))
        .collect()
}

/// With one-bit codes a 4096-byte block holds up to 32 768 elements, more than 16 384 (the
/// shared-memory budget a GPU kernel must size for).
#[test]
fn more_than_16384_elements_in_one_block() {
    let (seed, mut rng) = seeded("more_than_16384_elements_in_one_block");
    // Mostly one exponent: codes of about one bit.
    let n = rng.gen_range(150_000..250_000);
    let main = rng.gen_range(100..140u16) as u8;
    let w: Vec<u16> = (0..n)
        .map(|_| {
            let e = if rng.gen_bool(0.995) {
                main
            } else {
                main - rng.gen_range(1..5)
            };
            with_exponent(&mut rng, e)
        })
        .collect();
    let ctx = format!("seed {seed}: {n} elements mostly of exponent {main}");
    let (_, layout) = roundtrip(&[w], &ctx);
    assert!(
        layout.max_block_elements > 16384,
        "{ctx}: {}",
        layout.max_block_elements
    );
    assert!(layout.n_blocks >= 4, "{ctx}");

    // Only one exponent: every block holds exactly 32 768 one-bit codes.
    let n = 32768 * 3 + rng.gen_range(1..32768);
    let w: Vec<u16> = (0..n).map(|_| with_exponent(&mut rng, main)).collect();
    let ctx = format!("seed {seed}: {n} elements of exponent {main}");
    let (_, layout) = roundtrip(&[w], &ctx);
    assert_eq!(layout.max_block_elements, 32768, "{ctx}");
    assert_eq!(layout.n_blocks, 4, "{ctx}");
}

#[test]
fn exponents_from_240_are_refused_naming_the_member() {
    let (seed, mut rng) = seeded("exponents_from_240_are_refused_naming_the_member");
    let bad_values: [(u16, &str); 6] = [
        (0x7F80, "+inf"),
        (0xFF80, "-inf"),
        (0x7FC0, "NaN"),
        (0xFFC1, "-NaN"),
        (0x7800, "2^113 (exponent 240)"),
        (0xFA35, "exponent 244"),
    ];
    for (bad, what) in bad_values {
        let m = rng.gen_range(1..5);
        let mut members: Vec<Vec<u16>> = (0..m)
            .map(|_| {
                let n = rng.gen_range(1..3000);
                normal(&mut rng, n, 0.0, 0.02)
            })
            .collect();
        let target = rng.gen_range(0..m);
        let at = rng.gen_range(0..members[target].len());
        members[target][at] = bad;
        let ctx = format!("seed {seed}: {what} at member {target} element {at}");
        let bytes: Vec<Vec<u8>> = members.iter().map(|m| le_bytes(m)).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let e = encode_unit(&refs).expect_err(&ctx);
        assert_eq!(e.member, Some(target), "{ctx}: {e:?}");
        let e_val = exponent(bad);
        assert!(
            e.reason.contains(&format!("element {at} ")) && e.reason.contains(&e_val.to_string()),
            "{ctx}: {}",
            e.reason
        );
    }
    // Exponent 239 (the largest codable) is fine.
    let w: Vec<u16> = (0..100).map(|_| with_exponent(&mut rng, 239)).collect();
    roundtrip(&[w, vec![0x77FF]], &format!("seed {seed}: exponent 239"));
}

/// Writes a tiny one-layer qwen3 model; `q_dtype` is q_proj's dtype, `poison` an optional
/// (tensor, element, bf16 bits) to plant.
fn tiny_model(
    dir: &std::path::Path,
    rng: &mut StdRng,
    q_dtype: Dtype,
    poison: Option<(&str, usize, u16)>,
) {
    let config = serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 16,
        "intermediate_size": 24,
        "num_hidden_layers": 1,
        "tie_word_embeddings": false,
        "torch_dtype": "bfloat16",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let (h, i) = (16usize, 24usize);
    let specs: [(&str, [usize; 2]); 7] = [
        ("self_attn.q_proj", [h, h]),
        ("self_attn.k_proj", [h / 2, h]),
        ("self_attn.v_proj", [h / 2, h]),
        ("self_attn.o_proj", [h, h]),
        ("mlp.gate_proj", [i, h]),
        ("mlp.up_proj", [i, h]),
        ("mlp.down_proj", [h, i]),
    ];
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (m, shape) in specs {
        let name = format!("model.layers.0.{m}.weight");
        let n = shape[0] * shape[1];
        let mut w = normal(rng, n, 0.0, 0.02);
        if let Some((t, at, v)) = poison {
            if t == name {
                w[at] = v;
            }
        }
        let (dtype, data) = if m == "self_attn.q_proj" && q_dtype == Dtype::F32 {
            let f: Vec<u8> = w
                .iter()
                .flat_map(|&x| bf16::from_bits(x).to_f32().to_le_bytes())
                .collect();
            (Dtype::F32, f)
        } else {
            (Dtype::BF16, le_bytes(&w))
        };
        owned.push((name, dtype, shape.to_vec(), data));
    }
    owned.push((
        "model.norm.weight".into(),
        Dtype::BF16,
        vec![h],
        le_bytes(&normal(rng, h, 1.0, 0.1)),
    ));
    let views = owned.iter().map(|(n, dtype, shape, data)| {
        (
            n.clone(),
            RawTensor {
                dtype: *dtype,
                shape,
                data,
            },
        )
    });
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

fn no_safetensors_in(dir: &std::path::Path) -> bool {
    !std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
    })
}

#[test]
fn compress_model_refuses_a_non_bf16_unit_weight() {
    let (seed, mut rng) = seeded("compress_model_refuses_a_non_bf16_unit_weight");
    let src = common::temp_dir();
    let dst = common::temp_dir();
    tiny_model(src.path(), &mut rng, Dtype::F32, None);
    let err = compress_model(src.path(), dst.path(), &CompressOptions::default(), |_| {})
        .expect_err("an F32 q_proj must be refused");
    let msg = err.to_string();
    match &err {
        Df11Error::Unencodable {
            path,
            tensor,
            reason,
        } => {
            assert_eq!(
                tensor, "model.layers.0.self_attn.q_proj.weight",
                "seed {seed}: {msg}"
            );
            assert_eq!(
                path.file_name().unwrap(),
                "model.safetensors",
                "seed {seed}: {msg}"
            );
            assert!(reason.contains("F32"), "seed {seed}: {msg}");
        }
        other => panic!("seed {seed}: expected Unencodable, got {other:?}"),
    }
    assert!(
        msg.contains("model.safetensors") && msg.contains("model.layers.0.self_attn.q_proj.weight"),
        "seed {seed}: {msg}"
    );
    assert!(no_safetensors_in(dst.path()), "seed {seed}: output written");

    // The same model in BF16 compresses, opens and decodes to its weights.
    let src = common::temp_dir();
    let dst = common::temp_dir();
    tiny_model(src.path(), &mut rng, Dtype::BF16, None);
    compress_model(src.path(), dst.path(), &CompressOptions::default(), |_| {})
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let r = df11_candle::verify_model(dst.path(), src.path(), |_| {})
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert!(r.is_ok() && r.units == 1 && r.weights == 16 * 16 * 2 + 8 * 16 * 2 + 24 * 16 * 3);

    // A BF16 weight holding inf is refused, naming that weight.
    let src = common::temp_dir();
    let dst = common::temp_dir();
    let at = rng.gen_range(0..16 * 24);
    tiny_model(
        src.path(),
        &mut rng,
        Dtype::BF16,
        Some(("model.layers.0.mlp.up_proj.weight", at, 0xFF80)),
    );
    let err = compress_model(src.path(), dst.path(), &CompressOptions::default(), |_| {})
        .expect_err("an inf weight must be refused");
    let msg = err.to_string();
    match &err {
        Df11Error::Unencodable { tensor, .. } => {
            assert_eq!(
                tensor, "model.layers.0.mlp.up_proj.weight",
                "seed {seed}: {msg}"
            )
        }
        other => panic!("seed {seed}: expected Unencodable, got {other:?}"),
    }
    assert!(
        msg.contains("model.safetensors") && msg.contains(&format!("element {at} ")),
        "seed {seed}: {msg}"
    );
}
