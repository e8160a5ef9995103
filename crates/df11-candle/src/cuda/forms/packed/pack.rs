//! Packed exponents: a fixed-width device form of a unit's exponents, made at load time.
//!
//! A Huffman code must be decoded bit by bit along a dependent chain, which is what limits the
//! fused decode + matrix-vector kernel (about 25 instructions per weight, `kernels/df11_fused.cu`).
//! Here each member's seven most frequent exponents get the 3-bit codes 0-6 and code 7 means
//! "escaped": the exponent is the next byte of a side list. Eight weights are 24 bits, so a GPU
//! lane reads its eight codes with one funnel shift and turns them into exponents with two lookups
//! of a 4096-entry table (four codes each). In trained weights (and N(0, σ) ones) the top seven
//! exponents hold ~97% of the weights, so the form costs ~3.35 bits per weight against ~2.9 for the
//! Huffman stream plus its segment index: 11.35 of BF16's 16 bits with `sign_mantissa` (0.71x).
//!
//! It is a lossless re-arrangement of what the DF11 files hold (the on-disk format is unchanged):
//! the unit is decoded once on the CPU ([`unit_exponents`]: every code checked, every block
//! boundary checked against `output_positions`), then packed.
//!
//! Layout, for unit elements `j` (`q = j / 8`, the 8-group):
//! - `codes`: 3 bits per element, little-endian bit order; element `j`'s code is bits
//!   `[3 j, 3 j + 3)` of the word array, so 8-group `q` is the 24 bits at `24 q`.
//! - Escapes, by CHUNK of 2048 elements (256 8-groups). In chunk `c`, 8-group `q` belongs to LANE
//!   `q % 32` and PASS `(q / 32) % 8`: that is how a GPU warp walks a 2048-element piece of a row
//!   (lane `l` takes elements `8 l + 256 i` of pass `i`). A chunk's escaped exponents are listed
//!   lane by lane, each lane's in pass order (and element order within an 8-group), from
//!   `chunk_escapes[c]`; lane `l`'s start at `chunk_escapes[c] + lane_starts[32 c + l]` (a byte: a
//!   chunk may hold at most 255 escapes before its last lane, else the unit is not packed). So a
//!   lane finds its escapes from its own codes and two loads, without talking to other lanes.
//! - `tables[m]`: member `m`'s exponents for codes 0-6; byte 7 is 0 (escapes are ORed in).

use std::ops::Range;

use rayon::prelude::*;

pub use crate::cuda::exponent_walk::unit_exponents;
pub use crate::options::ExponentForm;

/// Elements per escape chunk (the GPU kernels' work item: 32 lanes x 8 passes x 8 elements).
pub const CHUNK: usize = 2048;

/// Lanes per chunk.
const LANES: usize = 32;

/// The code that sends an element to the escape list.
pub const ESCAPE: u8 = 7;

/// Largest packed size (codes, escapes and offsets, in bits per weight) that
/// [`PackedExponents::fits`] accepts: with the 8 bits of `sign_mantissa`, at most 0.72x of BF16.
pub const MAX_BITS_PER_WEIGHT: f64 = 3.52;

/// A unit's exponents in the packed form (see the module documentation).
#[derive(Debug, Clone)]
pub struct PackedExponents {
    /// 3-bit codes, padded with zero words (at least one past the last code).
    pub codes: Vec<u32>,
    /// List index of each chunk's first escape, and the total last.
    pub chunk_escapes: Vec<u32>,
    /// Per chunk and lane, where the lane's escapes start from its chunk's.
    pub lane_starts: Vec<u8>,
    /// Exponents of the escaped elements, chunk by chunk, lane-major.
    pub escapes: Vec<u8>,
    /// Per member, the exponents of codes 0-6.
    pub tables: Vec<[u8; 8]>,
    /// Element range of each member.
    pub members: Vec<Range<usize>>,
}

impl PackedExponents {
    /// Packs `exponents` (one per unit element) with one code table per member (`members` tile
    /// the unit in order). `None` when they do not, when a member boundary is not a multiple of 8
    /// (8-groups must not straddle members), when the unit is too large for 32-bit indices, or
    /// when a chunk has more than 255 escapes before its last lane.
    pub fn build(exponents: &[u8], members: &[Range<usize>]) -> Option<Self> {
        let n = exponents.len();
        if !members_pack(members, n) {
            return None;
        }
        let tables: Vec<[u8; 8]> = members
            .iter()
            .map(|m| top_seven(&exponents[m.clone()]))
            .collect();
        // code_of[m][e]: member m's code for exponent e.
        let code_of: Vec<[u8; 256]> = tables.iter().map(codes_of_table).collect();
        // The 8-group at element j (a multiple of 8): its codes as 24 bits, and one bit per escape.
        let group8 = |j: usize| -> (u32, u32) {
            let map = &code_of[members.partition_point(|m| m.end <= j)];
            let (mut bits, mut escaped) = (0u32, 0u32);
            for (k, &e) in exponents[j..(j + 8).min(n)].iter().enumerate() {
                let c = map[e as usize] as u32;
                bits |= c << (3 * k);
                escaped |= ((c == ESCAPE as u32) as u32) << k;
            }
            (bits, escaped)
        };

        // Codes, 32 elements (four 8-groups, three words) at a time, in parallel.
        let n_words = (3 * n).div_ceil(32) + 1;
        let mut codes = vec![0u32; n_words.div_ceil(3) * 3];
        codes
            .par_chunks_mut(3 * 1024)
            .enumerate()
            .for_each(|(c, words)| {
                for (t, triple) in words.chunks_mut(3).enumerate() {
                    let first = (c * 1024 + t) * 32;
                    let g: [u32; 4] = std::array::from_fn(|q| {
                        if first + 8 * q < n {
                            group8(first + 8 * q).0
                        } else {
                            0
                        }
                    });
                    let packed = [
                        g[0] | g[1] << 24,
                        g[1] >> 8 | g[2] << 16,
                        g[2] >> 16 | g[3] << 8,
                    ];
                    triple.copy_from_slice(&packed[..triple.len()]);
                }
            });

        // Each chunk's escapes, lane-major, in parallel; then the chunk bases.
        let per_chunk: Vec<Option<(Vec<u8>, [u8; LANES])>> = (0..n.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let mut list = Vec::new();
                let mut starts = [0u8; LANES];
                for (lane, start) in starts.iter_mut().enumerate() {
                    *start = u8::try_from(list.len()).ok()?;
                    for pass in 0..8 {
                        let first = c * CHUNK + 256 * pass + 8 * lane;
                        if first >= n {
                            break;
                        }
                        let mut escaped = group8(first).1;
                        while escaped != 0 {
                            list.push(exponents[first + escaped.trailing_zeros() as usize]);
                            escaped &= escaped - 1;
                        }
                    }
                }
                Some((list, starts))
            })
            .collect();
        let mut chunk_escapes = Vec::with_capacity(per_chunk.len() + 1);
        let mut lane_starts = Vec::with_capacity(LANES * per_chunk.len());
        let mut escapes = Vec::new();
        for chunk in per_chunk {
            let (list, starts) = chunk?;
            chunk_escapes.push(u32::try_from(escapes.len()).ok()?);
            lane_starts.extend_from_slice(&starts);
            escapes.extend_from_slice(&list);
        }
        chunk_escapes.push(u32::try_from(escapes.len()).ok()?);
        Some(Self {
            codes,
            chunk_escapes,
            lane_starts,
            escapes,
            tables,
            members: members.to_vec(),
        })
    }

    /// Elements packed.
    pub fn n_elements(&self) -> usize {
        self.members.last().map_or(0, |m| m.end)
    }

    /// Bytes on a device: codes, escape offsets and list, tables (`sign_mantissa` not counted).
    pub fn device_bytes(&self) -> usize {
        4 * self.codes.len()
            + 4 * self.chunk_escapes.len()
            + self.lane_starts.len()
            + self.escapes.len()
            + 8 * self.tables.len()
    }

    /// [`Self::device_bytes`] in bits per element.
    pub fn bits_per_weight(&self) -> f64 {
        8.0 * self.device_bytes() as f64 / self.n_elements().max(1) as f64
    }

    /// Whether the packed form is small enough to replace the Huffman stream on a device
    /// ([`MAX_BITS_PER_WEIGHT`]).
    pub fn fits(&self) -> bool {
        self.bits_per_weight() <= MAX_BITS_PER_WEIGHT
    }

    /// Element `j`'s 3-bit code.
    pub fn code(&self, j: usize) -> u8 {
        let bit = 3 * j;
        let lo = self.codes[bit / 32] as u64;
        let hi = self.codes[bit / 32 + 1] as u64;
        (((hi << 32 | lo) >> (bit % 32)) & 7) as u8
    }

    /// The exponents of `elements`, decoded as a GPU lane does: code table, or the escape list at
    /// the chunk's and lane's start plus the lane's escapes in earlier passes and earlier codes.
    pub fn decode(&self, elements: Range<usize>) -> Vec<u8> {
        let mut member = 0;
        elements
            .map(|j| {
                while !self.members[member].contains(&j) {
                    member += 1;
                }
                let code = self.code(j);
                if code != ESCAPE {
                    return self.tables[member][code as usize];
                }
                let (c, q) = (j / CHUNK, j / 8);
                let (lane, pass) = (q % LANES, (q / LANES) % 8);
                let earlier = (0..pass)
                    .flat_map(|p| {
                        let first = c * CHUNK + 256 * p + 8 * lane;
                        first..first + 8
                    })
                    .chain(8 * q..j)
                    .filter(|&i| i < self.n_elements() && self.code(i) == ESCAPE)
                    .count();
                let rank = self.chunk_escapes[c] as usize
                    + self.lane_starts[LANES * c + lane] as usize
                    + earlier;
                self.escapes[rank]
            })
            .collect()
    }
}

/// The seven most frequent exponents (ties: the smaller exponent first); unused slots repeat the
/// first, so every code 0-6 decodes to an exponent of the member.
fn top_seven(exponents: &[u8]) -> [u8; 8] {
    let hist = exponents
        .par_chunks(1 << 20)
        .map(|part| {
            let mut h = [0u64; 256];
            for &e in part {
                h[e as usize] += 1;
            }
            h
        })
        .reduce(
            || [0u64; 256],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x += y;
                }
                a
            },
        );
    table_of_histogram(&hist)
}

/// A member's code table from its exponent histogram: the seven most frequent exponents (ties:
/// the smaller exponent first), unused slots repeating the first, byte 7 zero. The GPU build
/// (`crate::cuda::packed::gpu_pack`) chooses its tables here too, so both builds give the same form.
pub fn table_of_histogram(hist: &[u64; 256]) -> [u8; 8] {
    let mut order: Vec<usize> = (0..256).filter(|&e| hist[e] > 0).collect();
    order.sort_by_key(|&e| (std::cmp::Reverse(hist[e]), e));
    let mut t = [order.first().copied().unwrap_or(0) as u8; 8];
    for (slot, &e) in t.iter_mut().zip(order.iter().take(7)) {
        *slot = e as u8;
    }
    t[7] = 0;
    t
}

/// `code_of[e]`: the code of exponent `e` under `table` (7, the escape, for the others).
pub fn codes_of_table(table: &[u8; 8]) -> [u8; 256] {
    let mut c = [ESCAPE; 256];
    for (code, &e) in table.iter().enumerate().take(7).rev() {
        c[e as usize] = code as u8;
    }
    c
}

/// Whether a unit of `n` elements whose members are `members` can take the packed form at all:
/// the members tile it in order, every boundary but the end is a multiple of 8 (an 8-group never
/// straddles members), and `n` fits 32-bit indices.
pub fn members_pack(members: &[Range<usize>], n: usize) -> bool {
    let tiles = members.first().is_some_and(|m| m.start == 0)
        && members.last().is_some_and(|m| m.end == n)
        && members.windows(2).all(|w| w[0].end == w[1].start);
    tiles
        && members
            .iter()
            .all(|m| m.start % 8 == 0 && (m.end % 8 == 0 || m.end == n))
        && u32::try_from(n).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::decode::DecodeTable;
    use crate::codec::encode::encode_unit;
    use crate::format::unit::{UnitLayout, UnitTensors};
    use half::bf16;
    use rand::{Rng, SeedableRng};

    /// One member over `n` elements.
    fn single(n: usize) -> Vec<Range<usize>> {
        std::iter::once(0..n).collect()
    }

    fn random_exponents(rng: &mut impl Rng, n: usize, spread: f32) -> Vec<u8> {
        (0..n)
            .map(|_| {
                let w: f32 = rng.gen_range(-1.0f32..1.0) * spread;
                let v = if rng.gen_bool(0.001) { w * 1e20 } else { w };
                (bf16::from_f32(v).to_bits() >> 7) as u8
            })
            .collect()
    }

    #[test]
    fn every_element_round_trips_from_any_start() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let n = 50_000 + 8 * rng.gen_range(0..500);
        let exps = random_exponents(&mut rng, n, 0.05);
        let split = 8 * rng.gen_range(1..n / 8);
        let members = vec![0..split, split..n];
        let p = PackedExponents::build(&exps, &members).unwrap();
        assert_eq!(p.decode(0..n), exps);
        for _ in 0..50 {
            let a = rng.gen_range(0..n);
            let b = rng.gen_range(a..=n.min(a + 3000));
            assert_eq!(p.decode(a..b), exps[a..b], "elements {a}..{b}");
        }
        assert_eq!(*p.chunk_escapes.last().unwrap() as usize, p.escapes.len());
    }

    #[test]
    fn members_get_their_own_tables() {
        // Two members with disjoint exponent ranges: each must escape almost nothing.
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let a: Vec<u8> = (0..4096).map(|_| rng.gen_range(100..107)).collect();
        let b: Vec<u8> = (0..4096).map(|_| rng.gen_range(200..207)).collect();
        let exps = [a, b].concat();
        let p = PackedExponents::build(&exps, &[0..4096, 4096..8192]).unwrap();
        assert!(p.escapes.is_empty());
        assert_eq!(p.decode(0..8192), exps);
    }

    #[test]
    fn a_chunk_with_too_many_escapes_is_refused() {
        // A chunk of seven common exponents, then a chunk of 32 rarer ones: 2048 escapes there.
        let mut exps: Vec<u8> = (0..2048).map(|i| 110 + (i % 7) as u8).collect();
        exps.extend((0..2048).map(|i| 30 + (i % 32) as u8));
        assert!(PackedExponents::build(&exps, &single(exps.len())).is_none());
    }

    #[test]
    fn many_escapes_round_trip() {
        // ~10% escapes: ~200 per chunk, lane starts up to near the byte limit.
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let n = 20_000 + 8 * rng.gen_range(0..300);
        let exps: Vec<u8> = (0..n)
            .map(|_| {
                if rng.gen_bool(0.1) {
                    rng.gen_range(20..40)
                } else {
                    rng.gen_range(110..117)
                }
            })
            .collect();
        let p = PackedExponents::build(&exps, &single(n)).unwrap();
        assert!(p.escapes.len() > n / 20);
        assert_eq!(p.decode(0..n), exps);
        let a = rng.gen_range(0..n);
        assert_eq!(p.decode(a..n), exps[a..]);
    }

    #[test]
    fn unaligned_members_are_refused() {
        assert!(PackedExponents::build(&[120; 64], &[0..12, 12..64]).is_none());
        // A last member may end anywhere.
        assert!(PackedExponents::build(&[120; 61], &[0..16, 16..61]).is_some());
    }

    #[test]
    fn gaussian_weights_fit_and_wide_ones_do_not() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let normal: Vec<u8> = (0..100_000)
            .map(|_| {
                // Sum of uniforms: close enough to N(0, 0.02) for the exponent histogram.
                let s: f32 = (0..12).map(|_| rng.gen_range(-0.5f32..0.5)).sum();
                (bf16::from_f32(0.02 * s).to_bits() >> 7) as u8
            })
            .collect();
        let p = PackedExponents::build(&normal, &single(normal.len())).unwrap();
        assert!(p.fits(), "{} bits per weight", p.bits_per_weight());
        // Wide: either too many escapes in a chunk to pack at all, or too large to be worth it.
        let wide: Vec<u8> = (0..100_000).map(|_| rng.gen_range(60..200)).collect();
        let p = PackedExponents::build(&wide, &single(wide.len()));
        assert!(p.is_none_or(|p| !p.fits()));
    }

    #[test]
    fn unit_exponents_refuse_damaged_gaps_and_positions() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let w: Vec<bf16> = (0..200_000)
            .map(|_| bf16::from_f32(rng.gen_range(-0.08f32..0.08)))
            .collect();
        let unit = encode_unit(&[bytemuck::cast_slice(&w)]).unwrap();
        let t = unit.tensors();
        let layout = UnitLayout::validate(&t).unwrap();
        let table = DecodeTable::new(t.luts);
        assert!(unit_exponents(&t, &layout, &table).is_ok());
        // A window's gap off by one (5-bit fields, MSB first): window 1 is bits 5..10.
        let mut gaps = t.gaps.to_vec();
        gaps[0] ^= 0x02;
        let damaged = UnitTensors { gaps: &gaps, ..t };
        assert!(unit_exponents(&damaged, &layout, &table).is_err());
        // A block said to end one element early.
        let mut bad = layout.clone();
        bad.output_positions[1] -= 1;
        assert!(unit_exponents(&t, &bad, &table).is_err());
    }

    #[test]
    fn unit_exponents_match_the_weights() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let n = 300_000 + rng.gen_range(0..1000);
        let w: Vec<bf16> = (0..n)
            .map(|_| bf16::from_f32(rng.gen_range(-0.08f32..0.08)))
            .collect();
        let unit = encode_unit(&[bytemuck::cast_slice(&w)]).unwrap();
        let t = unit.tensors();
        let layout = UnitLayout::validate(&t).unwrap();
        let exps = unit_exponents(&t, &layout, &DecodeTable::new(t.luts)).unwrap();
        let want: Vec<u8> = w.iter().map(|v| (v.to_bits() >> 7) as u8).collect();
        assert_eq!(exps, want);
    }
}
