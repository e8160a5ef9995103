//! CPU decoders: a sequential reference and a block-parallel decoder that, like the GPU kernel,
//! starts each block from `gaps` and `output_positions` (and so also checks them).
//!
//! Both walk the LUTs exactly as the format defines, through a 12-bit table derived from them
//! that yields up to four symbols per lookup: decoding is a chain of dependent lookups, so
//! resolving several codes per link is what makes it fast.

use std::ops::Range;

use half::bf16;
use rayon::prelude::*;

use crate::error::UnitDefect;
use crate::format::config::BYTES_PER_BLOCK;
use crate::format::unit::{UnitLayout, UnitTensors, LUT_POINTER_MIN};

/// Bits resolved by one lookup in the multi-symbol table.
const FAST_BITS: u32 = 12;

/// Most symbols one table entry yields.
const MAX_PER_ENTRY: usize = 4;

/// Bits in one block of the bitstream.
pub(crate) const BLOCK_BITS: u64 = BYTES_PER_BLOCK as u64 * 8;

/// The unit's LUTs, plus a 12-bit multi-symbol table derived from them.
///
/// An entry lists the codes that lie wholly inside its 12 bits and whose LUT walk cannot depend
/// on bits past them, so a lookup gives exactly what walking the LUTs code by code gives.
#[derive(Clone)]
pub struct DecodeTable {
    rows: Vec<[u8; 256]>,
    lengths: [u8; 256],
    /// Packed: bits 0-2 count, 3-6 total length, 16-47 the symbols, 48-63 their start offsets.
    multi: Vec<u64>,
}

impl DecodeTable {
    /// Builds the table from validated `luts` bytes (`K * 256`).
    pub fn new(luts: &[u8]) -> Self {
        let k = luts.len() / 256;
        let rows: Vec<[u8; 256]> = (0..k - 1)
            .map(|r| luts[r * 256..(r + 1) * 256].try_into().unwrap())
            .collect();
        let lengths: [u8; 256] = luts[(k - 1) * 256..].try_into().unwrap();
        let mut table = Self {
            rows,
            lengths,
            multi: vec![0; 1 << FAST_BITS],
        };
        for i in 0..1u32 << FAST_BITS {
            let mut entry = 0u64;
            let mut off = 0u32;
            let mut count = 0usize;
            while count < MAX_PER_ENTRY {
                let known = FAST_BITS - off;
                let bits = (i << off) & ((1 << FAST_BITS) - 1);
                match table.resolve(bits << (32 - FAST_BITS), known) {
                    Some((sym, len)) if len <= known => {
                        entry |= (sym as u64) << (16 + 8 * count);
                        entry |= (off as u64) << (48 + 4 * count);
                        off += len;
                        count += 1;
                    }
                    _ => break,
                }
            }
            entry |= count as u64 | ((off as u64) << 3);
            table.multi[i as usize] = entry;
        }
        table
    }

    /// The LUT walk's `(symbol, length)` for a code at the top of `bits`, if it is the same
    /// whatever the bits past the first `known` are.
    pub(crate) fn resolve(&self, bits: u32, known: u32) -> Option<(u8, u32)> {
        let mut row = 0usize;
        for level in 0..4u32 {
            let start = 8 * level;
            let idx = ((bits >> (24 - start)) & 0xFF) as usize;
            let v = if start + 8 <= known {
                self.rows[row][idx]
            } else if start < known {
                let free = 8 - (known - start);
                let lo = idx >> free << free;
                let first = self.rows[row][lo];
                if self.rows[row][lo..lo + (1 << free)]
                    .iter()
                    .any(|&x| x != first)
                {
                    return None;
                }
                first
            } else {
                return None;
            };
            if v < LUT_POINTER_MIN {
                return Some((v, self.lengths[v as usize] as u32));
            }
            row = 256 - v as usize;
        }
        None
    }

    /// Walks the LUTs for the code at the top of `bits`: `(symbol, length)`, or `None` when
    /// the chain is longer than four levels.
    #[inline]
    pub(crate) fn walk(&self, bits: u32) -> Option<(u8, u32)> {
        self.resolve(bits, 32)
    }

    /// The multi-symbol entry for the next 12 bits at the top of `bits` (packed as `multi`).
    #[inline(always)]
    pub(crate) fn multi_entry(&self, bits: u32) -> u64 {
        self.multi[(bits >> (32 - FAST_BITS)) as usize]
    }

    /// Code length of each symbol (0 for symbols the code does not have).
    pub fn code_lengths(&self) -> &[u8; 256] {
        &self.lengths
    }
}

/// Reads 64 bits of the stream starting at byte `at`, big-endian, zero past the end.
#[inline(always)]
pub(crate) fn load_be64(stream: &[u8], at: usize) -> u64 {
    match stream.get(at..at + 8) {
        Some(b) => u64::from_be_bytes(b.try_into().unwrap()),
        None => {
            let mut buf = [0u8; 8];
            if at < stream.len() {
                let n = stream.len() - at;
                buf[..n].copy_from_slice(&stream[at..]);
            }
            u64::from_be_bytes(buf)
        }
    }
}

/// Rebuilds a BF16 from its exponent and its sign/mantissa byte.
#[inline(always)]
fn fuse(exponent: u8, sign_mantissa: u8) -> u16 {
    (((sign_mantissa & 0x80) as u16) << 8)
        | ((exponent as u16) << 7)
        | (sign_mantissa & 0x7F) as u16
}

fn check_output(expected: usize, out_len: usize) -> Result<(), UnitDefect> {
    if out_len != expected {
        return Err(UnitDefect::Size(format!(
            "output buffer holds {out_len} elements, the decode produces {expected}"
        )));
    }
    Ok(())
}

/// Decodes `out.len()` codes starting at bit `pos`; returns the bit position after the last
/// code. When `CHECK` is set, `on_new_window(at)` is called for the first code that starts in
/// each 64-bit window after the starting one.
#[inline(always)]
fn decode_run<const CHECK: bool>(
    table: &DecodeTable,
    stream: &[u8],
    sign_mantissa: &[u8],
    out: &mut [u16],
    mut pos: u64,
    mut on_new_window: impl FnMut(u64) -> Result<(), UnitDefect>,
) -> Result<u64, UnitDefect> {
    let n = out.len();
    let sm = &sign_mantissa[..n];
    let mut i = 0usize;
    let mut next_window = (pos / 64 + 1) * 64;
    // 64 bits from the byte holding `pos`; at least 57 are valid after the shift, so a code can
    // be looked at while `used <= 25` (32 bits ahead).
    let mut window = load_be64(stream, (pos >> 3) as usize) << (pos & 7);
    let mut used = 0u32;
    while i < n {
        if used > 25 {
            pos += used as u64;
            used = 0;
            window = load_be64(stream, (pos >> 3) as usize) << (pos & 7);
        }
        let bits = ((window << used) >> 32) as u32;
        let e = table.multi[(bits >> (32 - FAST_BITS)) as usize];
        let count = (e & 7) as usize;
        let at = pos + used as u64;
        // Several codes at once, unless the unit ends.
        if count > 0 && i + MAX_PER_ENTRY <= n {
            if CHECK && at + ((e >> (48 + 4 * (count - 1))) & 0xF) >= next_window {
                // A new window starts at one of these codes (at most one: they span <= 12 bits).
                let k = (0..count)
                    .find(|&k| at + ((e >> (48 + 4 * k)) & 0xF) >= next_window)
                    .unwrap_or(0);
                let s = at + ((e >> (48 + 4 * k)) & 0xF);
                on_new_window(s)?;
                next_window = (s / 64 + 1) * 64;
            }
            let o: &mut [u16; MAX_PER_ENTRY] = (&mut out[i..i + MAX_PER_ENTRY]).try_into().unwrap();
            let s: &[u8; MAX_PER_ENTRY] = sm[i..i + MAX_PER_ENTRY].try_into().unwrap();
            for k in 0..MAX_PER_ENTRY {
                o[k] = fuse((e >> (16 + 8 * k)) as u8, s[k]);
            }
            i += count;
            used += ((e >> 3) & 0xF) as u32;
            continue;
        }
        // One code, through the LUT walk.
        if CHECK && at >= next_window {
            on_new_window(at)?;
            next_window = (at / 64 + 1) * 64;
        }
        let (sym, len) = if count > 0 {
            (
                (e >> 16) as u8,
                table.lengths[(e >> 16) as u8 as usize] as u32,
            )
        } else {
            table
                .walk(bits)
                .ok_or_else(|| UnitDefect::Stream(format!("invalid code at bit {at}")))?
        };
        out[i] = fuse(sym, sm[i]);
        i += 1;
        used += len;
    }
    Ok(pos + used as u64)
}

/// Sequential reference decoder: one bit cursor over the whole stream; ignores `gaps` and
/// `output_positions`. Writes the unit's BF16 weights into `out`.
pub fn decode_sequential(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
    out: &mut [bf16],
) -> Result<(), UnitDefect> {
    check_output(layout.n_elements, out.len())?;
    let out: &mut [u16] = bytemuck::cast_slice_mut(out);
    let end = decode_run::<false>(table, t.encoded_exponent, t.sign_mantissa, out, 0, |_| {
        Ok(())
    })?;
    check_end(end, layout)
}

fn check_end(end: u64, layout: &UnitLayout) -> Result<(), UnitDefect> {
    if end > layout.n_bytes as u64 * 8 {
        return Err(UnitDefect::Stream(format!(
            "the codes run to bit {end}, past the end of the {}-byte stream",
            layout.n_bytes
        )));
    }
    Ok(())
}

/// Reads thread window `w`'s 5-bit gap (MSB-first packed); 0 past the end of `gaps`.
#[inline(always)]
pub(crate) fn gap(gaps: &[u8], w: usize) -> u64 {
    let bit = w * 5;
    let hi = gaps.get(bit / 8).copied().unwrap_or(0) as u16;
    let lo = gaps.get(bit / 8 + 1).copied().unwrap_or(0) as u16;
    ((((hi << 8) | lo) >> (11 - bit % 8)) & 0x1F) as u64
}

/// Parallel decoder (rayon): each block starts from its first window's gap and its
/// `output_positions` entry, as on the GPU. Every window's gap and every block boundary is
/// checked against where the codes really start, so corrupt index data is an error.
pub fn decode_parallel(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
    out: &mut [bf16],
) -> Result<(), UnitDefect> {
    decode_blocks(t, layout, table, 0..layout.n_blocks, out)
}

/// Elements decoded by the blocks `blocks`: `output_positions[start]..output_positions[end]`.
pub fn block_elements(layout: &UnitLayout, blocks: Range<usize>) -> Range<usize> {
    layout.output_positions[blocks.start] as usize..layout.output_positions[blocks.end] as usize
}

/// Where a decode of `blocks` starts writing: their first element rounded down to a multiple of
/// 16 (so the GPU kernel's vector stores stay aligned). Element `i` of the unit lands at
/// `i - decode_base` of the output.
pub fn decode_base(layout: &UnitLayout, blocks: Range<usize>) -> usize {
    block_elements(layout, blocks).start & !15
}

/// The smallest block range whose elements cover `elements` (e.g. one member matrix).
pub fn blocks_covering(layout: &UnitLayout, elements: Range<usize>) -> Range<usize> {
    let pos = &layout.output_positions;
    if elements.is_empty() {
        return 0..0;
    }
    // First block b with pos[b+1] > start; last block with pos[b] < end.
    let first = pos[1..].partition_point(|&p| p as usize <= elements.start);
    let last = pos[..layout.n_blocks].partition_point(|&p| (p as usize) < elements.end);
    first..last.max(first)
}

/// Decodes blocks `blocks` of a unit (in parallel) into `out`, which must hold
/// [`block_elements`]`(layout, blocks)` values, with the same checks as [`decode_parallel`].
pub fn decode_blocks(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
    blocks: Range<usize>,
    out: &mut [bf16],
) -> Result<(), UnitDefect> {
    if blocks.start > blocks.end || blocks.end > layout.n_blocks {
        return Err(UnitDefect::Size(format!(
            "block range {blocks:?} outside the unit's {} blocks",
            layout.n_blocks
        )));
    }
    let base = block_elements(layout, blocks.clone());
    check_output(base.len(), out.len())?;
    let out: &mut [u16] = bytemuck::cast_slice_mut(out);
    let pos = &layout.output_positions;
    let n = layout.n_elements;

    // Cut the output into each block's slice.
    let mut pieces: Vec<(usize, &mut [u16])> = Vec::with_capacity(blocks.len());
    let mut rest = out;
    for b in blocks {
        let len = (pos[b + 1] - pos[b]) as usize;
        let (head, tail) = rest.split_at_mut(len);
        pieces.push((b, head));
        rest = tail;
    }

    pieces
        .into_par_iter()
        .with_min_len(4)
        .try_for_each(|(b, piece)| decode_block(t, layout, table, b, piece, n))
}

/// Decodes block `b` into `piece` (its `output_positions` range) and checks its index data.
fn decode_block(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
    b: usize,
    piece: &mut [u16],
    n: usize,
) -> Result<(), UnitDefect> {
    let pos = &layout.output_positions;
    let first = pos[b] as usize;
    let last = pos[b + 1] as usize;
    if first == last {
        // Only trailing blocks (the EOF tail) may start no code.
        return if last == n {
            Ok(())
        } else {
            Err(UnitDefect::OutputPositions(format!(
                "block {b} holds no element but is not at the end of the unit"
            )))
        };
    }
    let block_start = b as u64 * BLOCK_BITS;
    let start = block_start + gap(t.gaps, b * 512);
    // Later blocks' starts are checked against where the previous block ends; the first code
    // of the stream starts at bit 0 (otherwise a damaged gap could resync and decode wrongly).
    if b == 0 && start != 0 {
        return Err(UnitDefect::Stream(format!(
            "window 0: gaps says the first code starts at bit {start}, not 0"
        )));
    }
    let block_end = block_start + BLOCK_BITS;
    let end = decode_run::<true>(
        table,
        t.encoded_exponent,
        &t.sign_mantissa[first..last],
        piece,
        start,
        |at| {
            if at >= block_end {
                return Err(UnitDefect::OutputPositions(format!(
                    "block {b} is said to end at element {last}, but its codes run past the block"
                )));
            }
            let w = (at / 64) as usize;
            let expected = w as u64 * 64 + gap(t.gaps, w);
            if at != expected {
                return Err(UnitDefect::Stream(format!(
                    "window {w}: first code starts at bit {at}, gaps says {expected}"
                )));
            }
            Ok(())
        },
    )?;
    if last == n {
        check_end(end, layout)
    } else {
        let next = block_end + gap(t.gaps, (b + 1) * 512);
        if end != next {
            Err(UnitDefect::OutputPositions(format!(
                "block {b} ends at element {last} (bit {end}), but block {} starts at bit {next}",
                b + 1
            )))
        } else {
            Ok(())
        }
    }
}
