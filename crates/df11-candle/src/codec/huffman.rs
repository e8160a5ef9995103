//! Building the exponent code and its LUTs exactly as the official compressor does.
//!
//! The official compressor builds its code with `dahuffman` 0.4.2 and its tables with its own
//! `get_luts`. Reproducing their bytes needs three details, each documented where it is handled:
//! dahuffman's tie-breaking (with its EOF pseudo-symbol), the 32-bit length limiter, and the order
//! in which `get_luts` meets the codes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::format::unit::{LUT_POINTER_MIN, MAX_LUT_ROWS};

/// Longest code the format allows (the decoder looks at 32 bits).
pub const MAX_CODE_LENGTH: u32 = 32;

/// A symbol of the code: an exponent value, or dahuffman's end-of-file marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Symbol {
    /// dahuffman's `_EOF`; it compares below every other symbol.
    Eof,
    /// An exponent value.
    Exponent(u8),
}

/// One code word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeWord {
    /// The symbol coded.
    pub symbol: Symbol,
    /// Length in bits.
    pub length: u32,
    /// The bits, right-aligned (only meaningful when `length <= 64`).
    pub value: u64,
}

/// A code table in dahuffman's order (the order of the root node's symbol list).
#[derive(Debug, Clone)]
pub struct CodeTable {
    /// The code words, in table order.
    pub words: Vec<CodeWord>,
}

impl CodeTable {
    /// dahuffman's `HuffmanCodec.from_frequencies` for `(exponent, count)` pairs given in
    /// ascending exponent order, plus the EOF symbol with frequency 1.
    ///
    /// dahuffman keeps heap items `(frequency, [(symbol, code), ...])`; Python compares them by
    /// frequency, then by the first symbol of the list (symbols are distinct, and EOF is smaller
    /// than everything). The popped smaller item gets the 0 bit. Every key is unique, so the
    /// order of pops does not depend on the heap's internals.
    pub fn dahuffman(counts: &[(u8, u64)]) -> Self {
        struct Node {
            words: Vec<CodeWord>,
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(counts.len() * 2 + 2);
        let mut heap = BinaryHeap::new();
        let mut push_leaf = |symbol: Symbol, freq: u64, nodes: &mut Vec<Node>| {
            nodes.push(Node {
                words: vec![CodeWord {
                    symbol,
                    length: 0,
                    value: 0,
                }],
            });
            heap.push(Reverse((freq, symbol, nodes.len() - 1)));
        };
        for &(s, f) in counts {
            push_leaf(Symbol::Exponent(s), f, &mut nodes);
        }
        push_leaf(Symbol::Eof, 1, &mut nodes);

        while heap.len() > 1 {
            let Reverse((fa, rep_a, a)) = heap.pop().unwrap();
            let Reverse((fb, _, b)) = heap.pop().unwrap();
            let mut words = std::mem::take(&mut nodes[a].words);
            for w in &mut words {
                w.length += 1;
            }
            for mut w in std::mem::take(&mut nodes[b].words) {
                if w.length < 64 {
                    w.value += 1 << w.length;
                }
                w.length += 1;
                words.push(w);
            }
            nodes.push(Node { words });
            heap.push(Reverse((fa + fb, rep_a, nodes.len() - 1)));
        }
        let Reverse((_, _, root)) = heap.pop().unwrap();
        Self {
            words: std::mem::take(&mut nodes[root].words),
        }
    }

    /// The official `get_32bit_codec`: while the longest code exceeds 32 bits, set the counts of
    /// the k least frequent symbols to 1 (k = 2, 3, ...) and rebuild.
    ///
    /// The official code picks those symbols with `np.argpartition(freq, k)[:k]`, whose order
    /// among equal counts numpy leaves unspecified. We reproduce numpy's selection for small k
    /// (a selection sort, first minimum wins); with ties at the boundary and larger k, numpy may
    /// pick other symbols and the official output would differ from ours (both decode exactly).
    /// Real LLM units never reach this path (their codes are at most 24-27 bits).
    pub fn length_limited(counts: &[(u8, u64)]) -> Self {
        let mut table = Self::dahuffman(counts);
        let mut k = 2usize;
        while table.max_length() > MAX_CODE_LENGTH && k < counts.len() {
            let freqs: Vec<u64> = counts.iter().map(|c| c.1).collect();
            let chosen = select_smallest(&freqs, k);
            k += 1;
            let mut limited = counts.to_vec();
            for i in chosen {
                limited[i].1 = 1;
            }
            table = Self::dahuffman(&limited);
        }
        table
    }

    /// The longest code length.
    pub fn max_length(&self) -> u32 {
        self.words.iter().map(|w| w.length).max().unwrap_or(0)
    }

    /// The code word of the EOF symbol.
    pub fn eof(&self) -> CodeWord {
        *self
            .words
            .iter()
            .find(|w| w.symbol == Symbol::Eof)
            .expect("every table has an EOF code")
    }

    /// `(length, value)` per exponent value; length 0 for absent symbols.
    pub fn by_exponent(&self) -> ([u8; 256], [u32; 256]) {
        let mut len = [0u8; 256];
        let mut val = [0u32; 256];
        for w in &self.words {
            if let Symbol::Exponent(e) = w.symbol {
                len[e as usize] = w.length as u8;
                val[e as usize] = w.value as u32;
            }
        }
        (len, val)
    }

    /// The official `get_luts`: `K - 1` decode rows then the code-length row, `K * 256` bytes.
    /// Fails when the code needs more decode rows than pointer values exist.
    pub fn luts(&self) -> Result<Vec<u8>, String> {
        // A code longer than 8 bits contributes its first 8*floor((len-1)/8) bits as a prefix.
        // Prefixes are listed in table order, then stably sorted by length.
        let codes: Vec<(u8, u32, u64)> = self
            .words
            .iter()
            .filter_map(|w| match w.symbol {
                Symbol::Exponent(e) => Some((e, w.length, w.value)),
                Symbol::Eof => None,
            })
            .collect();
        let mut prefixes: Vec<(u32, u64)> = vec![(0, 0)];
        for &(_, len, val) in &codes {
            let plen = (len - 1) / 8 * 8;
            let p = (plen, val >> (len - plen));
            if !prefixes.contains(&p) {
                prefixes.push(p);
            }
        }
        // `get_luts` assumes every shorter byte prefix of a long code is some code's longest
        // prefix too, and crashes otherwise. Add the missing ones after the official ones, so
        // codes the official tool handles keep its row order exactly.
        for &(_, len, val) in &codes {
            let mut plen = 8;
            while plen < (len - 1) / 8 * 8 {
                let p = (plen, val >> (len - plen));
                if !prefixes.contains(&p) {
                    prefixes.push(p);
                }
                plen += 8;
            }
        }
        prefixes.sort_by_key(|p| p.0);
        if prefixes.len() > MAX_LUT_ROWS - 1 {
            return Err(format!(
                "the code needs {} decode tables; the format has room for {}",
                prefixes.len(),
                MAX_LUT_ROWS - 1
            ));
        }

        let mut luts = vec![0u8; (prefixes.len() + 1) * 256];
        // `get_luts` fills a row by carrying the last key's value forward, and that value
        // carries over from one row into the start of the next: the "leaked" entries.
        let mut carry: Option<u8> = None;
        for (row, &(plen, pval)) in prefixes.iter().enumerate() {
            let mut keys: [Option<u8>; 256] = [None; 256];
            for &(sym, len, val) in &codes {
                if len <= plen || (plen > 0 && val >> (len - plen) != pval) {
                    continue;
                }
                let rest_len = len - plen;
                let rest = val & ((1u64 << rest_len) - 1);
                let (key, value) = if (len - 1) / 8 * 8 == plen {
                    ((rest << (8 - rest_len)) as usize, sym)
                } else {
                    let next = (rest >> (rest_len - 8)) as usize;
                    let target = (plen + 8, val >> (len - plen - 8));
                    let target_row = prefixes
                        .iter()
                        .position(|&p| p == target)
                        .ok_or("internal: missing LUT prefix")?;
                    (next, (256 - target_row) as u8)
                };
                match keys[key] {
                    Some(v) if v != value => {
                        return Err(format!("LUT row {row} key {key} has two values"))
                    }
                    _ => keys[key] = Some(value),
                }
            }
            // The official code crashes when row 0 has no key 0 (only possible when the EOF code
            // is all zeros); those entries are unreachable, so any symbol of the row does.
            if carry.is_none() {
                carry = keys.iter().flatten().next().copied();
            }
            for (i, k) in keys.iter().enumerate() {
                if let Some(v) = k {
                    carry = Some(*v);
                }
                luts[row * 256 + i] = carry.unwrap_or(0);
            }
        }
        let lengths = prefixes.len() * 256;
        for &(sym, len, _) in &codes {
            luts[lengths + sym as usize] = len as u8;
        }
        debug_assert!(luts[..lengths]
            .iter()
            .all(|&v| v < LUT_POINTER_MIN || (256 - v as usize) < prefixes.len()));
        Ok(luts)
    }
}

/// Indices of the `k` smallest values as numpy's `argpartition(v, k)[:k]` returns them for small
/// k: a selection sort over an index permutation, keeping the first minimum found.
fn select_smallest(v: &[u64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    for i in 0..=k.min(v.len() - 1) {
        let mut min_i = i;
        for j in i + 1..v.len() {
            if v[idx[j]] < v[idx[min_i]] {
                min_i = j;
            }
        }
        idx.swap(i, min_i);
    }
    idx.truncate(k);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefix code: no word is a prefix of another, and Kraft's sum is exactly 1.
    fn assert_complete_prefix_code(t: &CodeTable) {
        let mut kraft = 0f64;
        for (i, a) in t.words.iter().enumerate() {
            kraft += 2f64.powi(-(a.length as i32));
            for b in &t.words[i + 1..] {
                let l = a.length.min(b.length);
                assert_ne!(
                    a.value >> (a.length - l),
                    b.value >> (b.length - l),
                    "{a:?} and {b:?} share a prefix"
                );
            }
        }
        assert!((kraft - 1.0).abs() < 1e-12);
    }

    #[test]
    fn small_code_matches_dahuffman_by_hand() {
        // dahuffman.HuffmanCodec.from_frequencies({1: 5, 2: 3, 3: 3}) gives (worked by hand):
        // EOF(1) + 2(3) -> node(4, rep EOF); 3(3) + node(4) -> node(7, rep 3);
        // 1(5) + node(7) -> root. Codes: 1 = "0", 3 = "10", EOF = "110", 2 = "111".
        let t = CodeTable::dahuffman(&[(1, 5), (2, 3), (3, 3)]);
        let get = |s| *t.words.iter().find(|w| w.symbol == s).unwrap();
        assert_eq!(
            (
                get(Symbol::Exponent(1)).length,
                get(Symbol::Exponent(1)).value
            ),
            (1, 0)
        );
        assert_eq!(
            (
                get(Symbol::Exponent(3)).length,
                get(Symbol::Exponent(3)).value
            ),
            (2, 0b10)
        );
        assert_eq!(
            (get(Symbol::Eof).length, get(Symbol::Eof).value),
            (3, 0b110)
        );
        assert_eq!(
            (
                get(Symbol::Exponent(2)).length,
                get(Symbol::Exponent(2)).value
            ),
            (3, 0b111)
        );
        assert_complete_prefix_code(&t);
    }

    #[test]
    fn merged_node_inherits_the_smaller_childs_symbol_for_ties() {
        // EOF(1) + 5(1) -> node(2, rep EOF); node(2, EOF) ties with 7(2) and wins (EOF is
        // smallest), so it takes the 0 bit: EOF = "00", 5 = "01", 7 = "1".
        let t = CodeTable::dahuffman(&[(5, 1), (7, 2)]);
        let get = |s| *t.words.iter().find(|w| w.symbol == s).unwrap();
        assert_eq!((get(Symbol::Eof).length, get(Symbol::Eof).value), (2, 0b00));
        assert_eq!(
            (
                get(Symbol::Exponent(5)).length,
                get(Symbol::Exponent(5)).value
            ),
            (2, 0b01)
        );
        assert_eq!(
            (
                get(Symbol::Exponent(7)).length,
                get(Symbol::Exponent(7)).value
            ),
            (1, 0b1)
        );
    }

    #[test]
    fn fibonacci_counts_are_limited_to_32_bits() {
        let mut counts = Vec::new();
        let (mut a, mut b) = (1u64, 1u64);
        for s in 0..40u8 {
            counts.push((s + 80, a));
            (a, b) = (b, a + b);
        }
        let raw = CodeTable::dahuffman(&counts);
        assert!(raw.max_length() > 32);
        let t = CodeTable::length_limited(&counts);
        assert!(t.max_length() <= 32);
        assert_complete_prefix_code(&t);
        let luts = t.luts().unwrap();
        assert!(luts.len() / 256 >= 5, "a 32-bit code needs 4 decode levels");
    }

    #[test]
    fn numpy_style_selection() {
        assert_eq!(select_smallest(&[5, 1, 1, 3, 1], 2), vec![1, 2]);
        assert_eq!(select_smallest(&[2, 9, 1], 2), vec![2, 0]);
    }
}
