//! One compressed unit: its six tensors and the checks that make them safe to decode.
//!
//! A unit (the official code calls it a group) is a module matched by a `pattern_dict` key. Its
//! BF16 member matrices are flattened and concatenated; the exponents are Huffman-coded into
//! `encoded_exponent`, the sign and mantissa bits kept raw in `sign_mantissa`.

use crate::error::UnitDefect;
use crate::format::config::{BYTES_PER_BLOCK, THREADS_PER_BLOCK};

/// Names of the six tensors of a unit, as `<unit>.<field>`.
pub const UNIT_FIELDS: [&str; 6] = [
    "encoded_exponent",
    "sign_mantissa",
    "luts",
    "gaps",
    "output_positions",
    "split_positions",
];

/// Bytes of `gaps` per block: 512 five-bit fields.
pub const GAP_BYTES_PER_BLOCK: usize = THREADS_PER_BLOCK * 5 / 8;

/// Most LUT rows a unit can have: 17 decode rows (pointers 255..=240) and the length row.
pub const MAX_LUT_ROWS: usize = 18;

/// Smallest LUT byte that is a pointer rather than a symbol.
pub const LUT_POINTER_MIN: u8 = 240;

/// The six tensors of a unit as raw little-endian bytes, borrowed from a file or a buffer.
#[derive(Debug, Clone, Copy)]
pub struct UnitTensors<'a> {
    /// Huffman bitstream of the exponents, MSB first.
    pub encoded_exponent: &'a [u8],
    /// `(sign << 7) | mantissa` of every weight.
    pub sign_mantissa: &'a [u8],
    /// `K * 256` bytes: `K - 1` decode rows and the code-length row.
    pub luts: &'a [u8],
    /// Packed 5-bit start offsets, one per 64-bit thread window.
    pub gaps: &'a [u8],
    /// Little-endian `u32` array: first element index of each block (plus N).
    pub output_positions: &'a [u8],
    /// Little-endian `i64` array: where the flat weights split into members.
    pub split_positions: &'a [u8],
}

/// Validated facts about a unit, computed once at load; decoders and kernels rely on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitLayout {
    /// N: number of weights.
    pub n_elements: usize,
    /// B: length of the bitstream in bytes.
    pub n_bytes: usize,
    /// NB: `ceil(B / 4096)`, the number of decode blocks.
    pub n_blocks: usize,
    /// K: rows of `luts` (decode rows + the length row).
    pub lut_rows: usize,
    /// `output_positions` as `u32`, always `n_blocks + 1` entries (a missing last entry is N).
    pub output_positions: Vec<u32>,
    /// Split offsets as element indices (empty for single-matrix units).
    pub split_positions: Vec<usize>,
    /// Most elements any block decodes (sizes the GPU kernel's shared memory).
    pub max_block_elements: usize,
    /// Longest code length in the length row among symbols the decode rows can produce.
    pub max_code_length: u8,
}

impl UnitLayout {
    /// Checks every invariant of the format that can be checked without decoding.
    pub fn validate(t: &UnitTensors<'_>) -> Result<Self, UnitDefect> {
        let n_elements = t.sign_mantissa.len();
        let n_bytes = t.encoded_exponent.len();
        if n_elements >= 1 << 31 || n_bytes >= 1 << 31 {
            return Err(UnitDefect::Size(format!(
                "N = {n_elements} and B = {n_bytes} must both be below 2^31"
            )));
        }
        if n_elements > 0 && n_bytes == 0 {
            return Err(UnitDefect::Size(format!(
                "{n_elements} elements but an empty bitstream"
            )));
        }
        let n_blocks = n_bytes.div_ceil(BYTES_PER_BLOCK);

        let (lut_rows, max_code_length) = validate_luts(t.luts)?;

        if t.gaps.len() < GAP_BYTES_PER_BLOCK * n_blocks {
            return Err(UnitDefect::GapsLength {
                expected_at_least: GAP_BYTES_PER_BLOCK * n_blocks,
                found: t.gaps.len(),
            });
        }

        let output_positions = validate_output_positions(t.output_positions, n_blocks, n_elements)?;
        let max_block_elements = output_positions
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0);
        // A block holds 32768 bits and every code is at least one bit long.
        if max_block_elements > BYTES_PER_BLOCK * 8 {
            return Err(UnitDefect::OutputPositions(format!(
                "a block claims {max_block_elements} elements; at most 32768 codes fit in a block"
            )));
        }

        let split_positions = validate_split_positions(t.split_positions, n_elements)?;
        Ok(Self {
            n_elements,
            n_bytes,
            n_blocks,
            lut_rows,
            output_positions,
            split_positions,
            max_block_elements,
            max_code_length,
        })
    }

    /// Element ranges of the members, from `split_positions`.
    pub fn member_ranges(&self) -> Vec<std::ops::Range<usize>> {
        let mut bounds = Vec::with_capacity(self.split_positions.len() + 2);
        bounds.push(0);
        bounds.extend_from_slice(&self.split_positions);
        bounds.push(self.n_elements);
        bounds.windows(2).map(|w| w[0]..w[1]).collect()
    }

    /// Checks that members of the given element counts tile the unit exactly.
    pub fn check_members(&self, numels: &[usize]) -> Result<(), UnitDefect> {
        let total: usize = numels.iter().sum();
        if total != self.n_elements {
            return Err(UnitDefect::MemberSizes {
                expected: self.n_elements,
                found: total,
            });
        }
        if numels.len() != self.split_positions.len() + 1 {
            return Err(UnitDefect::SplitPositions(format!(
                "{} split positions for {} members",
                self.split_positions.len(),
                numels.len()
            )));
        }
        let mut acc = 0;
        for (i, n) in numels[..numels.len() - 1].iter().enumerate() {
            acc += n;
            if self.split_positions[i] != acc {
                return Err(UnitDefect::SplitPositions(format!(
                    "split {i} is at {} but member sizes put it at {acc}",
                    self.split_positions[i]
                )));
            }
        }
        Ok(())
    }
}

/// Checks `luts` and returns `(K, longest code length)`.
fn validate_luts(luts: &[u8]) -> Result<(usize, u8), UnitDefect> {
    if luts.is_empty() || !luts.len().is_multiple_of(256) {
        return Err(UnitDefect::LutShape(format!(
            "{} bytes is not a whole number of 256-entry rows",
            luts.len()
        )));
    }
    let rows = luts.len() / 256;
    if !(2..=MAX_LUT_ROWS).contains(&rows) {
        return Err(UnitDefect::LutShape(format!(
            "{rows} rows; a unit has 2..={MAX_LUT_ROWS}"
        )));
    }
    let lengths = &luts[(rows - 1) * 256..];
    let mut max_len = 0u8;
    for row in 0..rows - 1 {
        for (index, &value) in luts[row * 256..(row + 1) * 256].iter().enumerate() {
            if value >= LUT_POINTER_MIN {
                let target = 256 - value as usize;
                if target >= rows - 1 {
                    return Err(UnitDefect::LutPointer { row, index, value });
                }
            } else {
                let length = lengths[value as usize];
                if length == 0 || length > 32 {
                    return Err(UnitDefect::LutCodeLength {
                        symbol: value,
                        length,
                    });
                }
                max_len = max_len.max(length);
            }
        }
    }
    Ok((rows, max_len))
}

/// Decodes the little-endian `u32` positions and checks them; returns `n_blocks + 1` entries.
fn validate_output_positions(
    bytes: &[u8],
    n_blocks: usize,
    n_elements: usize,
) -> Result<Vec<u32>, UnitDefect> {
    if !bytes.len().is_multiple_of(4) {
        return Err(UnitDefect::OutputPositions(format!(
            "{} bytes is not a whole number of u32",
            bytes.len()
        )));
    }
    let mut pos: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // NB + 1 entries normally; NB when the last block only holds the tail of the EOF code.
    let ok_len = pos.len() == n_blocks + 1 || (n_blocks > 0 && pos.len() == n_blocks);
    if !ok_len {
        return Err(UnitDefect::OutputPositions(format!(
            "{} entries for {n_blocks} blocks (expected {} or {n_blocks})",
            pos.len(),
            n_blocks + 1
        )));
    }
    if pos.first() != Some(&0) {
        return Err(UnitDefect::OutputPositions(format!(
            "first entry is {:?}, expected 0",
            pos.first()
        )));
    }
    if let Some(i) = pos.windows(2).position(|w| w[1] < w[0]) {
        return Err(UnitDefect::OutputPositions(format!(
            "entry {} ({}) is below entry {i} ({})",
            i + 1,
            pos[i + 1],
            pos[i]
        )));
    }
    if *pos.last().unwrap() as usize != n_elements {
        return Err(UnitDefect::OutputPositions(format!(
            "last entry is {}, expected N = {n_elements}",
            pos.last().unwrap()
        )));
    }
    if pos.len() == n_blocks {
        pos.push(n_elements as u32);
    }
    Ok(pos)
}

fn validate_split_positions(bytes: &[u8], n_elements: usize) -> Result<Vec<usize>, UnitDefect> {
    if !bytes.len().is_multiple_of(8) {
        return Err(UnitDefect::SplitPositions(format!(
            "{} bytes is not a whole number of i64",
            bytes.len()
        )));
    }
    let mut out = Vec::with_capacity(bytes.len() / 8);
    let mut prev = 0i64;
    for (i, c) in bytes.chunks_exact(8).enumerate() {
        let v = i64::from_le_bytes(c.try_into().unwrap());
        if v <= prev || v as u64 >= n_elements as u64 {
            return Err(UnitDefect::SplitPositions(format!(
                "entry {i} = {v} is not strictly increasing inside (0, {n_elements})"
            )));
        }
        out.push(v as usize);
        prev = v;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn short_output_positions_get_n_appended() {
        let p = validate_output_positions(&positions(&[0, 10, 20]), 3, 20).unwrap();
        assert_eq!(p, vec![0, 10, 20, 20]);
        let p = validate_output_positions(&positions(&[0, 10, 15, 20]), 3, 20).unwrap();
        assert_eq!(p, vec![0, 10, 15, 20]);
        assert!(validate_output_positions(&positions(&[0, 10]), 3, 20).is_err());
        assert!(validate_output_positions(&positions(&[0, 12, 10, 20]), 3, 20).is_err());
        assert!(validate_output_positions(&positions(&[1, 10, 15, 20]), 3, 20).is_err());
        assert!(validate_output_positions(&positions(&[0, 10, 15, 19]), 3, 20).is_err());
    }

    #[test]
    fn split_positions_must_increase_inside_the_unit() {
        let b = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        assert_eq!(
            validate_split_positions(&b(&[4, 9]), 10).unwrap(),
            vec![4, 9]
        );
        assert!(validate_split_positions(&b(&[4, 4]), 10).is_err());
        assert!(validate_split_positions(&b(&[0]), 10).is_err());
        assert!(validate_split_positions(&b(&[10]), 10).is_err());
        assert!(validate_split_positions(&b(&[-3]), 10).is_err());
    }
}
