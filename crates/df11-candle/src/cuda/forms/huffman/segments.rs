//! The segment index: where the codes of every 64-element segment of a unit start in its
//! bitstream, built once at load by decoding the unit on the CPU.
//!
//! The format only says where each 4096-byte block's codes start (`gaps` + `output_positions`),
//! so a GPU thread must scan its block to learn which elements it decodes. With the bit offset of
//! every 64th element known, a GPU lane decodes any 64 weights on its own: that is what the fused
//! decode + matrix-vector kernel and the segment decode kernel (`kernels/df11_fused.cu`) need.
//! The index is a lossless re-arrangement of what the DF11 files hold (the on-disk format is
//! unchanged) and costs 0.27 bits per weight: a `u32` base per 32 segments and a `u16` offset
//! from it per segment.
//!
//! Building it decodes every code of the unit and checks that each block's codes end where the
//! next block's start, so a unit with an index is also a unit whose stream decodes.

use rayon::prelude::*;

use crate::codec::decode::{gap, load_be64, DecodeTable, BLOCK_BITS};
use crate::error::UnitDefect;
use crate::format::unit::{UnitLayout, UnitTensors};

/// Elements per segment.
pub const SEGMENT: usize = 64;

/// Segments per `u32` base.
const GROUP: usize = 32;

/// Bit offsets of each segment's first code, plus the GPU decode table.
#[derive(Debug, Clone)]
pub struct SegmentIndex {
    /// Bit offset of segment `32 g`'s first code, for each group `g`.
    pub bases: Vec<u32>,
    /// Offset of segment `s` (and, last, of the end of the final code) from its group's base.
    pub deltas: Vec<u16>,
    /// 4096 entries for the next 12 bits of the stream: bits 0-23 up to three symbols, 24-29 the
    /// bits they use, 30-31 their count (0: the first code is longer; walk the LUTs).
    pub table: Vec<u32>,
}

impl SegmentIndex {
    /// Decodes the unit once (in parallel over blocks) and records each segment's start.
    /// `Ok(None)` when the stream is too long for 32-bit offsets (over 512 MiB of codes).
    pub fn build(
        t: &UnitTensors<'_>,
        layout: &UnitLayout,
        table: &DecodeTable,
    ) -> Result<Option<Self>, UnitDefect> {
        if layout.n_bytes as u64 * 8 >= 1 << 32 {
            return Ok(None);
        }
        let n = layout.n_elements;
        let n_segs = n.div_ceil(SEGMENT);
        let mut offsets = vec![0u64; n_segs + 1];
        let pos = &layout.output_positions;

        // Each block records the segments whose first element it decodes: disjoint slices.
        let mut pieces = Vec::with_capacity(layout.n_blocks);
        let mut rest = &mut offsets[..n_segs];
        let mut taken = 0usize;
        for b in 0..layout.n_blocks {
            let upto = (pos[b + 1] as usize).div_ceil(SEGMENT);
            let (head, tail) = rest.split_at_mut(upto - taken);
            pieces.push((b, head));
            rest = tail;
            taken = upto;
        }
        let ends: Vec<Option<u64>> = pieces
            .into_par_iter()
            .with_min_len(4)
            .map(|(b, piece)| walk_block(t, layout, table, b, piece))
            .collect::<Result<_, _>>()?;
        // The end of the last code: where the last block holding elements stops.
        offsets[n_segs] = ends.iter().rev().find_map(|e| *e).unwrap_or(0);

        let mut bases = Vec::with_capacity(n_segs / GROUP + 1);
        let mut deltas = Vec::with_capacity(n_segs + 1);
        for (s, &off) in offsets.iter().enumerate() {
            if s % GROUP == 0 {
                bases.push(off as u32);
            }
            let delta = off - *bases.last().expect("pushed above") as u64;
            // At most 31 segments of 64 codes of <= 32 bits each: 63,488 bits.
            deltas.push(u16::try_from(delta).map_err(|_| {
                UnitDefect::Stream(format!(
                    "segment {s} spans {delta} bits from its group start"
                ))
            })?);
        }
        Ok(Some(Self {
            bases,
            deltas,
            table: gpu_table(table),
        }))
    }

    /// Number of segments (`ceil(N / 64)`).
    pub fn n_segments(&self) -> usize {
        self.deltas.len() - 1
    }

    /// Bit offset of segment `s`'s first code (`s == n_segments()`: the end of the last code).
    pub fn offset(&self, s: usize) -> u64 {
        self.bases[s / GROUP] as u64 + self.deltas[s] as u64
    }

    /// Bytes of the index and table on a device.
    pub fn device_bytes(&self) -> usize {
        4 * self.bases.len() + 2 * self.deltas.len() + 4 * self.table.len()
    }

    /// The most [`Self::device_bytes`] can be for a unit of `n_elements` (before it is built:
    /// for budgets).
    pub fn max_device_bytes(n_elements: usize) -> usize {
        let segments = n_elements.div_ceil(SEGMENT);
        4 * (segments / GROUP + 1) + 2 * (segments + 1) + 4 * (1 << 12)
    }
}

/// Walks block `b`'s codes, recording the bit offset of each element that starts a segment into
/// `piece` (segment `ceil(pos[b] / 64)` onwards). Returns where its last code ends, if it has any.
fn walk_block(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
    b: usize,
    piece: &mut [u64],
) -> Result<Option<u64>, UnitDefect> {
    let pos = &layout.output_positions;
    let (first, last) = (pos[b] as usize, pos[b + 1] as usize);
    if first == last {
        return if last == layout.n_elements {
            Ok(None)
        } else {
            Err(UnitDefect::OutputPositions(format!(
                "block {b} holds no element but is not at the end of the unit"
            )))
        };
    }
    let start = b as u64 * BLOCK_BITS + gap(t.gaps, b * 512);
    if b == 0 && start != 0 {
        return Err(UnitDefect::Stream(format!(
            "window 0: gaps says the first code starts at bit {start}, not 0"
        )));
    }
    let stream = t.encoded_exponent;
    let first_seg = first.div_ceil(SEGMENT);
    let mut next = first_seg * SEGMENT; // next element that starts a segment
    let mut record = |j: usize, bit: u64| piece[j / SEGMENT - first_seg] = bit;
    let mut bit = start;
    let mut j = first;
    let lengths = table.code_lengths();
    while j < last {
        let bits = (load_be64(stream, (bit >> 3) as usize) << (bit & 7) >> 32) as u32;
        let e = table.multi_entry(bits);
        let count = (e & 7) as usize;
        if count > 0 && j + count <= last {
            while next < j + count {
                let k = next - j;
                record(next, bit + ((e >> (48 + 4 * k)) & 0xF));
                next += SEGMENT;
            }
            j += count;
            bit += (e >> 3) & 0xF;
            continue;
        }
        let len = if count > 0 {
            lengths[(e >> 16) as u8 as usize] as u64
        } else {
            table
                .walk(bits)
                .ok_or_else(|| UnitDefect::Stream(format!("invalid code at bit {bit}")))?
                .1 as u64
        };
        if j == next {
            record(j, bit);
            next += SEGMENT;
        }
        j += 1;
        bit += len;
    }
    check_block_end(t, layout, b, last, bit)?;
    Ok(Some(bit))
}

/// Checks where block `b`'s codes end (`bit`, after element `last`): inside the stream for the
/// last block holding elements, else exactly where the next block's first code starts.
pub(crate) fn check_block_end(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    b: usize,
    last: usize,
    bit: u64,
) -> Result<(), UnitDefect> {
    if last == layout.n_elements {
        if bit > layout.n_bytes as u64 * 8 {
            return Err(UnitDefect::Stream(format!(
                "the codes run to bit {bit}, past the end of the {}-byte stream",
                layout.n_bytes
            )));
        }
    } else {
        let next_start = (b as u64 + 1) * BLOCK_BITS + gap(t.gaps, (b + 1) * 512);
        if bit != next_start {
            return Err(UnitDefect::OutputPositions(format!(
                "block {b} ends at element {last} (bit {bit}), but block {} starts at bit {next_start}",
                b + 1
            )));
        }
    }
    Ok(())
}

/// The GPU's 12-bit table: up to three symbols per entry, from the CPU table's (up to four).
fn gpu_table(table: &DecodeTable) -> Vec<u32> {
    (0..1u32 << 12)
        .map(|i| {
            let e = table.multi_entry(i << 20);
            let count = (e & 7).min(3);
            if count == 0 {
                return 0;
            }
            // Bits used by the first `count` symbols: where the 4th starts, or all of them.
            let used = if e & 7 > 3 {
                (e >> (48 + 12)) & 0xF
            } else {
                (e >> 3) & 0xF
            };
            let symbols = (e >> 16) & ((1u64 << (8 * count)) - 1);
            (symbols | used << 24 | count << 30) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::decode::decode_sequential;
    use crate::codec::encode::encode_unit;
    use half::bf16;
    use rand::{Rng, SeedableRng};

    /// Decodes segment `s` from its recorded offset the way the GPU lane does (12-bit table,
    /// LUT walk for long codes) and returns its exponents.
    fn decode_segment(
        idx: &SegmentIndex,
        table: &DecodeTable,
        stream: &[u8],
        s: usize,
        count: usize,
    ) -> Vec<u8> {
        let mut bit = idx.offset(s);
        let mut out = Vec::new();
        while out.len() < count {
            let bits = (load_be64(stream, (bit >> 3) as usize) << (bit & 7) >> 32) as u32;
            let e = idx.table[(bits >> 20) as usize];
            if e >> 30 == 0 {
                let (sym, len) = table.walk(bits).expect("valid code");
                out.push(sym);
                bit += len as u64;
            } else {
                for k in 0..(e >> 30) {
                    out.push((e >> (8 * k)) as u8);
                }
                bit += ((e >> 24) & 63) as u64;
            }
        }
        out.truncate(count);
        out
    }

    #[test]
    fn every_segment_decodes_alone() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        // Mostly N(0, 0.02)-like exponents with rare extreme ones (long codes).
        let n: usize = 200_000 + rng.gen_range(0..5000);
        let weights: Vec<bf16> = (0..n)
            .map(|_| {
                let v: f32 = if rng.gen_bool(0.001) {
                    rng.gen_range(-1e30..1e30)
                } else {
                    rng.gen_range(-0.08..0.08)
                };
                bf16::from_f32(v)
            })
            .collect();
        let bytes: &[u8] = bytemuck::cast_slice(&weights);
        let unit = encode_unit(&[bytes]).expect("encode");
        let t = unit.tensors();
        let layout = UnitLayout::validate(&t).expect("valid");
        let table = DecodeTable::new(t.luts);
        let idx = SegmentIndex::build(&t, &layout, &table).unwrap().unwrap();
        assert_eq!(idx.n_segments(), n.div_ceil(SEGMENT));
        let mut reference = vec![bf16::ZERO; n];
        decode_sequential(&t, &layout, &table, &mut reference).unwrap();
        for s in 0..idx.n_segments() {
            let count = SEGMENT.min(n - s * SEGMENT);
            let exps = decode_segment(&idx, &table, t.encoded_exponent, s, count);
            for (k, e) in exps.iter().enumerate() {
                let w = reference[s * SEGMENT + k].to_bits();
                assert_eq!(*e as u16, (w >> 7) & 0xFF, "segment {s} element {k}");
            }
        }
        assert!(idx.offset(idx.n_segments()) <= t.encoded_exponent.len() as u64 * 8);
    }
}
