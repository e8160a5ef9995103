//! The checked CPU walk of a unit's exponents ([`unit_exponents`]): what the packed form is
//! built from on the CPU (`crate::cuda::packed`), with every check of the CPU decoder.

use rayon::prelude::*;

use crate::codec::decode::{gap, load_be64, DecodeTable, BLOCK_BITS};
use crate::cuda::huffman::segments::check_block_end;
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

/// The checked CPU walk of the unit's last block that holds elements: its codes valid, its
/// windows where `gaps` says, and its last code ending inside the stream. What the GPU build of
/// the packed form adds to the block kernel's own checks (count and chain), which read bytes past
/// the stream as zeros and so cannot tell a stream whose last codes run past its end (found by
/// `tests/gpu_pack.rs`'s damaged streams: ~9% of random bit flips of a fixture unit).
#[cfg(any(feature = "cuda", test))]
pub(crate) fn check_last_block(
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    table: &DecodeTable,
) -> Result<(), UnitDefect> {
    let pos = &layout.output_positions;
    let Some(b) = (0..layout.n_blocks).rev().find(|&b| pos[b] < pos[b + 1]) else {
        return Ok(());
    };
    let mut piece = vec![0u8; (pos[b + 1] - pos[b]) as usize];
    block_exponents(t, layout, table, b, &mut piece)
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

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::format::model::Df11Model;

    /// The last-block walk refuses every damaged stream the whole walk refuses for running past
    /// its end, and accepts what the whole walk accepts (random bit flips in the last 64 bytes of
    /// a fixture unit's stream).
    #[test]
    fn last_block_check_sees_the_end_of_the_stream() {
        let seed = rand::random::<u64>();
        eprintln!("seed {seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let model = Df11Model::open(crate::fixtures::model_dir("qwen3-tiny", "df11")).unwrap();
        let unit = &model.units()[0];
        let t = model.unit_tensors(unit).unwrap();
        let table = DecodeTable::new(t.luts);
        let layout = UnitLayout::validate(&t).unwrap();
        check_last_block(&t, &layout, &table).unwrap();
        let mut past_end = 0;
        for _ in 0..600 {
            let mut stream = t.encoded_exponent.to_vec();
            // Flips near the end, where they can make the last codes run past it.
            let from = stream.len().saturating_sub(64);
            for _ in 0..rng.gen_range(1..8) {
                let i = rng.gen_range(from..stream.len());
                stream[i] ^= 1 << rng.gen_range(0..8);
            }
            let damaged = UnitTensors {
                encoded_exponent: &stream,
                ..t
            };
            let whole = unit_exponents(&damaged, &layout, &table);
            let last = check_last_block(&damaged, &layout, &table);
            match whole {
                Err(UnitDefect::Stream(m)) if m.contains("past the end") => {
                    past_end += 1;
                    assert!(last.is_err(), "seed {seed}: the last block passed: {m}");
                }
                Ok(_) => assert!(last.is_ok(), "seed {seed}: {last:?}"),
                Err(_) => {}
            }
        }
        assert!(past_end > 0, "seed {seed}: no stream ran past its end");
    }
}
