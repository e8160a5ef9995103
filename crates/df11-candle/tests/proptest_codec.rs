//! Property tests (proptest) of the codec: random exponent distributions, degenerate ones
//! included (one symbol, two symbols, very skewed histograms that give long codes, 1-element
//! and odd-sized members, units of up to 40 members, sizes around block boundaries), each
//! compressed by `encode_unit` and decoded by both CPU decoders byte for byte
//! (`common::roundtrip::roundtrip`), by a decode of each member's blocks alone, by the packer's
//! checked exponent decode, and, where the members allow it (boundaries at multiples of 8),
//! through `PackedExponents` and back.
//!
//! CI runs a few cases of each (a few seconds in all); `PROPTEST_CASES=N` runs N of each.
//! A failure is shrunk and its seed saved under `proptest-regressions/` by proptest.

mod common;

use std::ops::Range;

use common::roundtrip::{le_bytes, roundtrip};
use df11_candle::decode::{block_elements, blocks_covering, decode_blocks};
use df11_candle::packed::unit_exponents;
use df11_candle::{encode_unit, DecodeTable, PackedExponents};
use half::bf16;
use proptest::prelude::*;
use proptest::test_runner::Config;

/// `PROPTEST_CASES` when set, else `default` (small: CI runs these on 2 cores).
fn cases(default: u32) -> Config {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Config {
        cases: n,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

/// How exponents are drawn.
#[derive(Debug, Clone)]
enum Histogram {
    /// Every weight has this exponent.
    One(u8),
    /// Two exponents; the second with probability `p` (in 1/1000).
    Two(u8, u8, u32),
    /// Exponents `base..base + k`, exponent `base + i` about `r^i` times as likely as the
    /// first (r in 1/100): long codes when `k` is large and `r` near 0.6.
    Skewed { base: u8, k: u8, r: u32 },
    /// Uniform over `lo..=hi`.
    Uniform(u8, u8),
}

fn histogram() -> impl Strategy<Value = Histogram> {
    prop_oneof![
        (0u8..240).prop_map(Histogram::One),
        (0u8..240, 0u8..240, 1u32..1000).prop_map(|(a, b, p)| Histogram::Two(a, b, p)),
        (0u8..200, 3u8..40, 40u32..75).prop_map(|(base, k, r)| Histogram::Skewed { base, k, r }),
        (0u8..240, 0u8..240).prop_map(|(a, b)| Histogram::Uniform(a.min(b), a.max(b))),
    ]
}

/// SplitMix64: the weights of a case from its seed (proptest shrinks the seed, not the data).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl Histogram {
    fn exponent(&self, rng: &mut Mix) -> u8 {
        match *self {
            Self::One(e) => e,
            Self::Two(a, b, p) => {
                if rng.below(1000) < p as u64 {
                    b
                } else {
                    a
                }
            }
            Self::Skewed { base, k, r } => {
                // Geometric: step to the next exponent with probability r/100.
                let mut i = 0u8;
                while i + 1 < k && rng.below(100) < r as u64 {
                    i += 1;
                }
                base + i
            }
            Self::Uniform(lo, hi) => lo + rng.below(hi as u64 - lo as u64 + 1) as u8,
        }
    }
}

/// BF16 weights of `sizes` members: exponents from `h`, random sign and mantissa.
fn weights(h: &Histogram, sizes: &[usize], seed: u64) -> Vec<Vec<u16>> {
    let mut rng = Mix(seed);
    sizes
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| {
                    let e = h.exponent(&mut rng) as u16;
                    (rng.next() as u16 & 0x807F) | (e << 7)
                })
                .collect()
        })
        .collect()
}

/// Member sizes: odd ones, 1-element ones, around a 4096-byte block of 1-bit codes (32768).
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 1usize..64,
        4 => 64usize..5000,
        1 => 32_700usize..32_840,
        1 => 5000usize..70_000,
    ]
}

/// Runs every check on a unit of `members`. A unit whose code needs more decode tables than
/// the DF11 format has (17) is refused by the encoder, a limit of the format: the check is then
/// that the refusal is that typed one, and that the unit has more than 17 distinct exponents
/// (a code of n symbols needs at most n tables: one per internal node at a depth of 8, 16 or
/// 24 bits, plus the root's), so every unit within the format round-trips.
fn check_unit(members: &[Vec<u16>], ctx: &str) {
    let bytes: Vec<Vec<u8>> = members.iter().map(|m| le_bytes(m)).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    if let Err(e) = encode_unit(&refs) {
        let distinct: std::collections::BTreeSet<u16> =
            members.iter().flatten().map(|w| (w >> 7) & 0xFF).collect();
        assert!(
            e.member.is_none()
                && e.reason
                    .contains("decode tables; the format has room for 17")
                && distinct.len() > 17,
            "{ctx}: refused with {} distinct exponents: {e:?}",
            distinct.len()
        );
        return;
    }
    let (enc, layout) = roundtrip(members, ctx);
    let t = enc.tensors();
    let table = DecodeTable::new(t.luts);
    let flat: Vec<u16> = members.concat();

    // Each member decoded from its own blocks, as a linear layer's weight is on the CPU.
    for (m, r) in layout.member_ranges().into_iter().enumerate() {
        let blocks = blocks_covering(&layout, r.clone());
        let elems = block_elements(&layout, blocks.clone());
        assert!(
            elems.start <= r.start && r.end <= elems.end,
            "{ctx}: member {m}"
        );
        let mut out = vec![bf16::ZERO; elems.len()];
        decode_blocks(&t, &layout, &table, blocks, &mut out)
            .unwrap_or_else(|d| panic!("{ctx}: member {m}: {d}"));
        let got: Vec<u16> = out[r.start - elems.start..r.end - elems.start]
            .iter()
            .map(|w| w.to_bits())
            .collect();
        assert!(
            got == flat[r.clone()],
            "{ctx}: member {m} decoded alone differs"
        );
    }

    // The packer's checked decode, then the packed form where the members allow it.
    let exponents = unit_exponents(&t, &layout, &table).unwrap_or_else(|d| panic!("{ctx}: {d}"));
    let want: Vec<u8> = flat.iter().map(|w| (w >> 7) as u8).collect();
    assert!(exponents == want, "{ctx}: unit_exponents differ");
    let ranges: Vec<Range<usize>> = layout.member_ranges();
    let aligned = ranges.iter().all(|r| r.start % 8 == 0);
    match PackedExponents::build(&exponents, &ranges) {
        Some(p) => {
            assert!(aligned, "{ctx}: packed unaligned members");
            let n = flat.len();
            assert!(p.decode(0..n) == want, "{ctx}: packed -> exponents differ");
            let a = n / 3;
            assert!(p.decode(a..n) == want[a..], "{ctx}: packed from {a}");
        }
        // Refused: unaligned members, or a chunk with more than 255 escapes before its last
        // lane (possible only with more than 7 exponents in a member).
        None => assert!(
            !aligned || want.iter().collect::<std::collections::BTreeSet<_>>().len() > 7,
            "{ctx}: the packer refused aligned members of at most 7 exponents"
        ),
    }
}

proptest! {
    #![proptest_config(cases(32))]

    /// One member of any size and distribution.
    #[test]
    fn one_member_round_trips(h in histogram(), n in size(), seed in any::<u64>()) {
        let members = weights(&h, &[n], seed);
        check_unit(&members, &format!("{h:?}, {n} weights, seed {seed}"));
    }

    /// Units of 1 to 40 members of any sizes (1-element and odd ones included).
    #[test]
    fn many_members_round_trip(
        h in histogram(),
        sizes in prop::collection::vec(prop_oneof![3 => 1usize..40, 1 => 40usize..3000], 1..40),
        seed in any::<u64>(),
    ) {
        let members = weights(&h, &sizes, seed);
        check_unit(&members, &format!("{h:?}, members {sizes:?}, seed {seed}"));
    }

    /// Members whose sizes are multiples of 8, so the packer always applies (at most 7
    /// exponents: no escapes, or few).
    #[test]
    fn aligned_members_pack(
        h in histogram(),
        eighths in prop::collection::vec(1usize..600, 1..8),
        last in 1usize..64,
        seed in any::<u64>(),
    ) {
        let mut sizes: Vec<usize> = eighths.iter().map(|e| 8 * e).collect();
        sizes.push(last);
        let members = weights(&h, &sizes, seed);
        check_unit(&members, &format!("{h:?}, members {sizes:?}, seed {seed}"));
    }

    /// A skewed histogram over many exponents, in a unit large enough for long codes.
    #[test]
    fn long_codes_round_trip(k in 20u8..40, r in 55u32..70, n in 100_000usize..300_000, seed in any::<u64>()) {
        let h = Histogram::Skewed { base: 240 - k, k, r };
        let members = weights(&h, &[n], seed);
        check_unit(&members, &format!("{h:?}, {n} weights, seed {seed}"));
    }
}

/// No weight, or an empty member: the encoder refuses it (a DF11 unit cannot hold one).
#[test]
fn empty_members_are_refused() {
    assert!(encode_unit(&[]).is_err());
    assert!(encode_unit(&[&[]]).is_err());
    let w = le_bytes(&[0x3F80, 0x4000]);
    let e = encode_unit(&[&w, &[], &w]).unwrap_err();
    assert_eq!(e.member, Some(1));
}
