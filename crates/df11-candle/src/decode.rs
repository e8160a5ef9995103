//! CPU decoders: a sequential reference and a block-parallel decoder that, like the GPU kernel,
//! starts each block from `gaps` and `output_positions` (and so also checks them).

use half::bf16;
use rayon::prelude::*;

use crate::config::BYTES_PER_BLOCK;
use crate::error::UnitDefect;
use crate::unit::{UnitLayout, UnitTensors, LUT_POINTER_MIN};

/// Bits resolved by one lookup in the fast table.
const FAST_BITS: u32 = 12;

/// Bits in one block of the bitstream.
const BLOCK_BITS: u64 = BYTES_PER_BLOCK as u64 * 8;

/// The unit's LUTs, plus a 12-bit single-lookup table derived from them.
///
/// The fast table gives exactly what walking the LUTs gives: an entry is filled only when the
/// walk's result cannot depend on the bits past the 12 it is indexed by.
#[derive(Clone)]
pub struct DecodeTable {
    rows: Vec<[u8; 256]>,
    lengths: [u8; 256],
    /// `(length << 8) | symbol`, or 0 where the LUT walk must be done.
    fast: Vec<u16>,
}

impl DecodeTable {
    /// Builds the table from validated `luts` bytes (`K * 256`).
    pub fn new(luts: &[u8]) -> Self {
        let k = luts.len() / 256;
        let rows: Vec<[u8; 256]> = (0..k - 1)
            .map(|r| luts[r * 256..(r + 1) * 256].try_into().unwrap())
            .collect();
        let lengths: [u8; 256] = luts[(k - 1) * 256..].try_into().unwrap();
        let mut fast = vec![0u16; 1 << FAST_BITS];
        for (i, slot) in fast.iter_mut().enumerate() {
            let v0 = rows[0][i >> 4];
            let sym = if v0 < LUT_POINTER_MIN {
                Some(v0)
            } else {
                // The next row is indexed by 4 known bits and 4 unknown ones: usable only if all
                // 16 candidates hold the same symbol.
                let row = &rows[256 - v0 as usize];
                let lo = (i & 0xF) << 4;
                let first = row[lo];
                (first < LUT_POINTER_MIN && row[lo..lo + 16].iter().all(|&v| v == first))
                    .then_some(first)
            };
            if let Some(s) = sym {
                *slot = ((lengths[s as usize] as u16) << 8) | s as u16;
            }
        }
        Self {
            rows,
            lengths,
            fast,
        }
    }

    /// Decodes the code at the top of `bits` (MSB-aligned): `(symbol, length)`, or `None` when the
    /// LUT chain is longer than four levels.
    #[inline(always)]
    fn lookup(&self, bits: u32) -> Option<(u8, u32)> {
        let e = self.fast[(bits >> (32 - FAST_BITS)) as usize];
        if e != 0 {
            return Some(((e & 0xFF) as u8, (e >> 8) as u32));
        }
        self.walk(bits)
    }

    #[cold]
    fn walk(&self, bits: u32) -> Option<(u8, u32)> {
        let mut row = 0usize;
        for level in 0..4 {
            let idx = ((bits >> (24 - 8 * level)) & 0xFF) as usize;
            let v = self.rows[row][idx];
            if v < LUT_POINTER_MIN {
                return Some((v, self.lengths[v as usize] as u32));
            }
            row = 256 - v as usize;
        }
        None
    }

    /// Code length of each symbol (0 for symbols the code does not have).
    pub fn code_lengths(&self) -> &[u8; 256] {
        &self.lengths
    }
}

/// Reads 64 bits of the stream starting at byte `at`, big-endian, zero past the end.
#[inline(always)]
fn load_be64(stream: &[u8], at: usize) -> u64 {
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
    (((sign_mantissa & 0x80) as u16) << 8) | ((exponent as u16) << 7) | (sign_mantissa & 0x7F) as u16
}

fn check_output(layout: &UnitLayout, out_len: usize) -> Result<(), UnitDefect> {
    if out_len != layout.n_elements {
        return Err(UnitDefect::Size(format!(
            "output buffer holds {out_len} elements, the unit {}",
            layout.n_elements
        )));
    }
    Ok(())
}

/// Decodes `out.len()` codes starting at bit `pos`; returns the bit position after the last code.
/// `check_window(pos)` is called for the first code that starts in each new 64-bit window.
#[inline(always)]
fn decode_run(
    table: &DecodeTable,
    stream: &[u8],
    sign_mantissa: &[u8],
    out: &mut [u16],
    mut pos: u64,
    mut on_new_window: impl FnMut(u64) -> Result<(), UnitDefect>,
) -> Result<u64, UnitDefect> {
    let n = out.len();
    let mut i = 0usize;
    let mut next_window = (pos / 64 + 1) * 64;
    while i < n {
        // 64 bits from the byte holding `pos`; at least 57 are valid after the shift, so codes
        // can be decoded while 32 bits remain ahead of the cursor.
        let window = load_be64(stream, (pos >> 3) as usize) << (pos & 7);
        let mut used = 0u32;
        while used <= 25 && i < n {
            let at = pos + used as u64;
            if at >= next_window {
                on_new_window(at)?;
                next_window = (at / 64 + 1) * 64;
            }
            let bits = ((window << used) >> 32) as u32;
            let (sym, len) = table
                .lookup(bits)
                .ok_or_else(|| UnitDefect::Stream(format!("invalid code at bit {at}")))?;
            out[i] = fuse(sym, sign_mantissa[i]);
            used += len;
            i += 1;
        }
        pos += used as u64;
    }
    Ok(pos)
}

/// Sequential reference decoder: one bit cursor over the whole stream; ignores `gaps` and
/// `output_positions`. Writes the unit's BF16 weights into `out`.
pub fn decode_sequential(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
    out: &mut [bf16],
) -> Result<(), UnitDefect> {
    check_output(layout, out.len())?;
    let out: &mut [u16] = bytemuck::cast_slice_mut(out);
    let end = decode_run(table, t.encoded_exponent, t.sign_mantissa, out, 0, |_| Ok(()))?;
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
fn gap(gaps: &[u8], w: usize) -> u64 {
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
    check_output(layout, out.len())?;
    let out: &mut [u16] = bytemuck::cast_slice_mut(out);
    let pos = &layout.output_positions;
    let n = layout.n_elements;

    // Cut the output into each block's slice.
    let mut pieces: Vec<(usize, &mut [u16])> = Vec::with_capacity(layout.n_blocks);
    let mut rest = out;
    for b in 0..layout.n_blocks {
        let len = (pos[b + 1] - pos[b]) as usize;
        let (head, tail) = rest.split_at_mut(len);
        pieces.push((b, head));
        rest = tail;
    }

    pieces
        .into_par_iter()
        .with_min_len(4)
        .try_for_each(|(b, piece)| {
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
            let block_end = block_start + BLOCK_BITS;
            let end = decode_run(
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
        })
}
