//! Encoding one unit: BF16 weights in, the six DF11 tensors out, byte for byte as the official
//! dfloat11 0.5.0 compressor writes them.

use rayon::prelude::*;

use crate::codec::huffman::CodeTable;
use crate::format::config::{BYTES_PER_BLOCK, BYTES_PER_THREAD, THREADS_PER_BLOCK};
use crate::format::unit::{UnitTensors, LUT_POINTER_MIN};

/// The six tensors of a unit, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedUnit {
    /// Huffman bitstream of the exponents.
    pub encoded_exponent: Vec<u8>,
    /// `(sign << 7) | mantissa` per weight.
    pub sign_mantissa: Vec<u8>,
    /// `K * 256` bytes of tables.
    pub luts: Vec<u8>,
    /// Packed 5-bit gaps.
    pub gaps: Vec<u8>,
    /// Little-endian `u32` output positions, as bytes.
    pub output_positions: Vec<u8>,
    /// Little-endian `i64` split positions, as bytes.
    pub split_positions: Vec<u8>,
}

impl EncodedUnit {
    /// Borrowed view, as the decoders take it.
    pub fn tensors(&self) -> UnitTensors<'_> {
        UnitTensors {
            encoded_exponent: &self.encoded_exponent,
            sign_mantissa: &self.sign_mantissa,
            luts: &self.luts,
            gaps: &self.gaps,
            output_positions: &self.output_positions,
            split_positions: &self.split_positions,
        }
    }

    /// Rows of `luts`.
    pub fn lut_rows(&self) -> usize {
        self.luts.len() / 256
    }

    /// Total bytes of the six tensors.
    pub fn total_bytes(&self) -> usize {
        self.encoded_exponent.len()
            + self.sign_mantissa.len()
            + self.luts.len()
            + self.gaps.len()
            + self.output_positions.len()
            + self.split_positions.len()
    }
}

/// Why a unit cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError {
    /// Index of the member matrix at fault, if one is.
    pub member: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

/// Elements per parallel chunk in the histogram pass.
const CHUNK: usize = 1 << 16;

#[inline(always)]
fn exponent(lo: u8, hi: u8) -> u8 {
    (hi << 1) | (lo >> 7)
}

/// Encodes the concatenation of `members` (BF16 as little-endian bytes, 2 per weight).
pub fn encode_unit(members: &[&[u8]]) -> Result<EncodedUnit, EncodeError> {
    for (m, bytes) in members.iter().enumerate() {
        if bytes.len() % 2 != 0 {
            return Err(EncodeError {
                member: Some(m),
                reason: format!("{} bytes is not a whole number of BF16 values", bytes.len()),
            });
        }
    }
    if let Some(m) = members.iter().position(|b| b.is_empty()) {
        return Err(EncodeError {
            member: Some(m),
            reason: "an empty weight cannot be a member of a DF11 unit".into(),
        });
    }
    if members.is_empty() {
        return Err(EncodeError {
            member: None,
            reason: "a unit needs at least one weight".into(),
        });
    }
    let n: usize = members.iter().map(|b| b.len() / 2).sum();
    if n >= 1 << 31 {
        return Err(EncodeError {
            member: None,
            reason: format!("{n} weights; a unit must hold fewer than 2^31"),
        });
    }

    // Pass 1 (parallel): sign/mantissa bytes and the exponent histogram.
    let mut sign_mantissa = vec![0u8; n];
    let mut hist = [0u64; 256];
    {
        let mut rest: &mut [u8] = &mut sign_mantissa;
        for bytes in members {
            let (dst, tail) = rest.split_at_mut(bytes.len() / 2);
            rest = tail;
            let h = dst
                .par_chunks_mut(CHUNK)
                .zip(bytes.par_chunks(2 * CHUNK))
                .map(|(d, s)| {
                    let mut h = [0u64; 256];
                    for (o, w) in d.iter_mut().zip(s.chunks_exact(2)) {
                        *o = (w[1] & 0x80) | (w[0] & 0x7F);
                        h[exponent(w[0], w[1]) as usize] += 1;
                    }
                    h
                })
                .reduce(
                    || [0u64; 256],
                    |mut a, b| {
                        a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                        a
                    },
                );
            hist.iter_mut().zip(h).for_each(|(x, y)| *x += y);
        }
    }
    if let Some(e) = (LUT_POINTER_MIN as usize..256).find(|&e| hist[e] > 0) {
        let (member, index) = find_exponent(members, e as u8);
        return Err(EncodeError {
            member: Some(member),
            reason: format!(
                "element {index} has exponent {e} (|w| >= 2^113, inf or NaN); DF11 can only code exponents below 240"
            ),
        });
    }

    // The code: symbols in ascending exponent order, as `torch.unique` gives them.
    let counts: Vec<(u8, u64)> = (0..=255u8)
        .filter(|&e| hist[e as usize] > 0)
        .map(|e| (e, hist[e as usize]))
        .collect();
    let table = CodeTable::length_limited(&counts);
    let luts = table.luts().map_err(|reason| EncodeError {
        member: None,
        reason,
    })?;

    // Pass 2 (sequential): the bitstream, with gaps and block positions recorded as the official
    // `encode` does, before each symbol.
    let (lens, vals) = table.by_exponent();
    let eof = table.eof();
    let window_bits = 8 * BYTES_PER_THREAD as u64;
    let block_bits = 8 * BYTES_PER_BLOCK as u64;
    let mut stream: Vec<u8> = Vec::with_capacity(n / 2 + 16);
    let mut gaps_raw: Vec<u8> = Vec::with_capacity(n / 16 + 8);
    let mut positions: Vec<u32> = Vec::with_capacity(n / 8192 + 4);
    let mut acc: u64 = 0;
    let mut pending: u32 = 0;
    let mut total: u64 = 0;
    let mut next_window = 0u64;
    let mut next_block = 0u64;
    let mut index = 0u32;
    let mut mark = |total: u64, index: u32, gaps: &mut Vec<u8>, pos: &mut Vec<u32>| {
        if total >= next_window {
            gaps.push((total % window_bits) as u8);
            next_window = gaps.len() as u64 * window_bits;
        }
        if total >= next_block {
            pos.push(index);
            next_block = pos.len() as u64 * block_bits;
        }
    };
    for bytes in members {
        for w in bytes.chunks_exact(2) {
            let e = exponent(w[0], w[1]) as usize;
            mark(total, index, &mut gaps_raw, &mut positions);
            let len = lens[e] as u32;
            acc = (acc << len) | vals[e] as u64;
            pending += len;
            total += len as u64;
            while pending >= 8 {
                pending -= 8;
                stream.push((acc >> pending) as u8);
            }
            index += 1;
        }
    }
    if pending > 0 {
        // dahuffman ends a stream that is not byte-aligned with as much of the EOF code as fits.
        mark(total, index, &mut gaps_raw, &mut positions);
        acc = (acc << eof.length) | eof.value;
        pending += eof.length;
        let byte = if pending >= 8 {
            acc >> (pending - 8)
        } else {
            acc << (8 - pending)
        };
        stream.push(byte as u8);
    }
    positions.push(n as u32);

    let n_blocks = stream.len().div_ceil(BYTES_PER_BLOCK);
    gaps_raw.resize(gaps_raw.len().max(THREADS_PER_BLOCK * n_blocks), 0);
    let gaps = pack_gaps(&gaps_raw);

    let mut split = Vec::with_capacity(8 * members.len());
    let mut acc_n = 0i64;
    for bytes in &members[..members.len().saturating_sub(1)] {
        acc_n += (bytes.len() / 2) as i64;
        split.extend_from_slice(&acc_n.to_le_bytes());
    }

    Ok(EncodedUnit {
        encoded_exponent: stream,
        sign_mantissa,
        luts,
        gaps,
        output_positions: positions.iter().flat_map(|p| p.to_le_bytes()).collect(),
        split_positions: split,
    })
}

/// Packs 5-bit values MSB first, zero-padding the last byte (`np.packbits` of the bit list).
fn pack_gaps(gaps: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity((gaps.len() * 5).div_ceil(8));
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for &g in gaps {
        acc = (acc << 5) | (g & 0x1F) as u64;
        bits += 5;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        out.push((acc << (8 - bits)) as u8);
    }
    out
}

/// The first element (member, index) whose exponent is `e`.
fn find_exponent(members: &[&[u8]], e: u8) -> (usize, usize) {
    for (m, bytes) in members.iter().enumerate() {
        if let Some(i) = bytes
            .chunks_exact(2)
            .position(|w| exponent(w[0], w[1]) == e)
        {
            return (m, i);
        }
    }
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_pack_msb_first() {
        // 0b00001, 0b11111, 0b00000, 0b10101, then 4 zeros: 40 bits.
        let p = pack_gaps(&[1, 31, 0, 21, 0, 0, 0, 0]);
        assert_eq!(p, vec![0b0000_1111, 0b1100_0001, 0b0101_0000, 0, 0]);
    }
}
