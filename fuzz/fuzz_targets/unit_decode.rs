//! A unit's six tensors (the raw unit format of `df11_fuzz::RawUnit`) through validation and
//! both CPU decoders. Neither may panic; when the block-parallel decoder accepts the unit (it
//! checks `gaps` and `output_positions` too), the sequential decoder and an independent bit-by-bit
//! LUT walk must give the same weights, and decoding the later half of the blocks must give the
//! same values as the whole decode.
#![no_main]

use df11_candle::decode::{block_elements, blocks_covering, decode_base, decode_blocks};
use df11_candle::{decode_parallel, decode_sequential, DecodeTable, UnitLayout};
use df11_fuzz::{reference_exponents, RawUnit};
use half::bf16;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let unit = RawUnit::parse(data);
    let t = unit.tensors();
    let layout = match UnitLayout::validate(&t) {
        Ok(l) => l,
        Err(defect) => {
            let _ = defect.to_string();
            return;
        }
    };
    let n = layout.n_elements;
    assert_eq!(n, t.sign_mantissa.len());
    assert_eq!(layout.output_positions.len(), layout.n_blocks + 1);
    let ranges = layout.member_ranges();
    assert_eq!(ranges.len(), layout.split_positions.len() + 1);
    let numels: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
    layout
        .check_members(&numels)
        .expect("the unit's own member sizes tile it");

    let table = DecodeTable::new(t.luts);
    let mut parallel = vec![bf16::ZERO; n];
    let par = decode_parallel(&t, &layout, &table, &mut parallel);
    let mut sequential = vec![bf16::ZERO; n];
    let seq = decode_sequential(&t, &layout, &table, &mut sequential);
    if let Err(d) = &par {
        let _ = d.to_string();
        return;
    }
    // The parallel decoder checks more than the sequential one: what it accepts, both agree on.
    assert_eq!(
        seq,
        Ok(()),
        "sequential refused a unit the parallel decoder accepted"
    );
    assert_eq!(parallel, sequential);

    let (exponents, end) = reference_exponents(t.encoded_exponent, t.luts, n)
        .expect("the LUT walk fails on a unit the decoders accepted");
    assert!(
        end <= 8 * layout.n_bytes as u64,
        "codes past the stream's end"
    );
    for (i, (w, e)) in parallel.iter().zip(&exponents).enumerate() {
        let bits = w.to_bits();
        assert_eq!((bits >> 7) as u8, *e, "element {i}: exponent");
        let sm = t.sign_mantissa[i];
        assert_eq!(
            (bits & 0x7F) as u8 | ((bits >> 8) as u8 & 0x80),
            sm,
            "element {i}"
        );
    }

    // The later half of the blocks alone, as a member decode does.
    let blocks = layout.n_blocks / 2..layout.n_blocks;
    let elems = block_elements(&layout, blocks.clone());
    let mut part = vec![bf16::ZERO; elems.len()];
    decode_blocks(&t, &layout, &table, blocks.clone(), &mut part).expect("a block range");
    assert_eq!(part[..], parallel[elems.clone()]);
    assert!(decode_base(&layout, blocks) <= elems.start);
    for r in &ranges {
        let b = blocks_covering(&layout, r.clone());
        let covered = block_elements(&layout, b);
        assert!(r.is_empty() || (covered.start <= r.start && r.end <= covered.end));
    }
});
