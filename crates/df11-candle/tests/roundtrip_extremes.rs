//! Round trips of extreme units: one or two exponents, one element, a histogram that needs the
//! 32-bit code-length limiter, blocks of more than 16 384 elements
//! (`common::roundtrip::roundtrip`).
//!
//! Every run draws fresh random seeds; each assertion message names the seed. To reproduce a
//! failure, run with `DF11_TEST_SEED=<seed>`.

mod common;

use std::collections::HashMap;

use common::roundtrip::*;
use common::seeded;
use df11_candle::huffman::{CodeTable, MAX_CODE_LENGTH};
use rand::seq::SliceRandom;
use rand::Rng;

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
