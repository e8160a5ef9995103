//! Helpers of the codec round-trip tests (`roundtrip_*.rs`, `encode_refusals.rs`): random BF16
//! data and [`roundtrip`], which encodes, validates and decodes a unit and checks everything.

use df11_candle::huffman::MAX_CODE_LENGTH;
use df11_candle::{
    decode_parallel, decode_sequential, encode_unit, DecodeTable, EncodedUnit, UnitLayout,
};
use half::bf16;
use rand::Rng;
use rand_distr::{Distribution, Normal};

pub fn exponent(w: u16) -> u8 {
    (w >> 7) as u8
}

/// BF16 from an exponent and random sign and mantissa bits.
pub fn with_exponent(rng: &mut impl Rng, e: u8) -> u16 {
    (rng.gen::<u16>() & 0x807F) | ((e as u16) << 7)
}

pub fn normal(rng: &mut impl Rng, n: usize, mean: f32, std: f32) -> Vec<u16> {
    let d = Normal::new(mean, std).unwrap();
    (0..n)
        .map(|_| bf16::from_f32(d.sample(rng)).to_bits())
        .collect()
}

pub fn le_bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Encodes `members`, validates, checks every structural fact of the layout, decodes with both
/// decoders and compares them bytewise with the input. Returns the unit and its layout.
pub fn roundtrip(members: &[Vec<u16>], ctx: &str) -> (EncodedUnit, UnitLayout) {
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
