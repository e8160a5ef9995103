//! The checked CPU walk of a unit's exponents ([`unit_exponents`]): what the packed form is
//! built from on the CPU (`crate::cuda::packed`), with every check of the CPU decoder.

use rayon::prelude::*;

use crate::codec::decode::{gap, load_be64, DecodeTable, BLOCK_BITS};
use crate::cuda::segments::check_block_end;
use crate::error::UnitDefect;
use crate::format::unit::{UnitLayout, UnitTensors};

/// Decodes every exponent of a unit on the CPU, in parallel over blocks, with the checks of
/// [`crate::decode_parallel`]: every code valid, the first code of every 64-bit window where `gaps`
/// says, each block's codes ending where the next block's start (or, for the last, inside the
/// stream). The packed form needs only the codes, but a unit the CPU path would refuse is refused
/// here too.
pub fn unit_exponents(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
) -> Result<Vec<u8>, UnitDefect> {
    let pos = &layout.output_positions;
    let mut exponents = vec![0u8; layout.n_elements];
    let mut pieces = Vec::with_capacity(layout.n_blocks);
    let mut rest = &mut exponents[pos[0] as usize..];
    for b in 0..layout.n_blocks {
        let (head, tail) = rest.split_at_mut((pos[b + 1] - pos[b]) as usize);
        pieces.push((b, head));
        rest = tail;
    }
    pieces
        .into_par_iter()
        .with_min_len(4)
        .try_for_each(|(b, piece)| block_exponents(t, layout, table, b, piece))?;
    Ok(exponents)
}

/// Decodes block `b`'s exponents into `piece` (its `output_positions` range).
fn block_exponents(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
    b: usize,
    piece: &mut [u8],
) -> Result<(), UnitDefect> {
    let last = layout.output_positions[b + 1] as usize;
    if piece.is_empty() {
        return if last == layout.n_elements {
            Ok(())
        } else {
            Err(UnitDefect::OutputPositions(format!(
                "block {b} holds no element but is not at the end of the unit"
            )))
        };
    }
    let mut bit = b as u64 * BLOCK_BITS + gap(t.gaps, b * 512);
    if b == 0 && bit != 0 {
        return Err(UnitDefect::Stream(format!(
            "window 0: gaps says the first code starts at bit {bit}, not 0"
        )));
    }
    let (stream, lengths, n) = (t.encoded_exponent, table.code_lengths(), piece.len());
    let block_end = (b as u64 + 1) * BLOCK_BITS;
    let mut next_window = (bit / 64 + 1) * 64;
    // The first code starting in each later window must start where `gaps` says.
    let check_window = |at: u64| -> Result<u64, UnitDefect> {
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
        Ok((at / 64 + 1) * 64)
    };
    let mut i = 0;
    while i < n {
        let bits = (load_be64(stream, (bit >> 3) as usize) << (bit & 7) >> 32) as u32;
        let e = table.multi_entry(bits);
        let count = (e & 7) as usize;
        if count > 0 && i + count <= n {
            // Code k starts at bit + ((e >> (48 + 4k)) & 0xF); at most one enters a new window.
            let start = |k: usize| bit + ((e >> (48 + 4 * k)) & 0xF);
            if start(count - 1) >= next_window {
                let k = (0..count).find(|&k| start(k) >= next_window).unwrap_or(0);
                next_window = check_window(start(k))?;
            }
            for (k, out) in piece[i..i + count].iter_mut().enumerate() {
                *out = (e >> (16 + 8 * k)) as u8;
            }
            i += count;
            bit += (e >> 3) & 0xF;
            continue;
        }
        if bit >= next_window {
            next_window = check_window(bit)?;
        }
        let (symbol, len) = if count > 0 {
            let symbol = (e >> 16) as u8;
            (symbol, lengths[symbol as usize] as u32)
        } else {
            table
                .walk(bits)
                .ok_or_else(|| UnitDefect::Stream(format!("invalid code at bit {bit}")))?
        };
        piece[i] = symbol;
        i += 1;
        bit += len as u64;
    }
    check_block_end(t, layout, b, last, bit)
}
