//! A damaged bitstream (`encoded_exponent`): never a panic; decoding fails with a unit defect, or
//! what it gets wrong starts at the damage.
//!
//! Each case copies `tests/fixtures/models/qwen3-tiny/df11` into a temporary folder and damages
//! one thing (helpers: `common/damage.rs`). Random trials draw a fresh seed per run, printed in
//! the assertion messages; replay one with `DF11_TEST_SEED=<seed>`.

mod common;

use std::panic::catch_unwind;

use common::damage::*;
use common::seeded;
use df11_candle::{Df11Model, UnitDefect, UnitLayout};
use half::bf16;
use rand::Rng;

/// A corrupted bitstream never panics; decoding fails with a unit defect, or succeeds with
/// output that differs from the original only from the first damaged code on (and, for the
/// parallel decoder, only within the damaged block).
#[test]
fn corrupted_bitstream_never_panics() {
    let (seed, mut rng) = seeded("corrupted_bitstream_never_panics");
    let mut outcomes = [0usize; 3]; // parallel: error, ok-and-different, ok-and-equal
    for r in references() {
        let layout = UnitLayout::validate(&r.unit.tensors()).unwrap();
        let n_bytes = r.unit.encoded_exponent.len();
        for trial in 0..150 {
            let at = rng.gen_range(0..n_bytes);
            let mask: u8 = rng.gen_range(1..=255);
            let case = format!(
                "seed {seed}: {}: trial {trial}: encoded_exponent[{at}] ^= {mask:#04x}",
                r.name
            );
            let mut u = r.unit.clone();
            u.encoded_exponent[at] ^= mask;
            let (par, seq) = decode_both(&u, &case).unwrap_or_else(|d| panic!("{case}: {d}"));
            // The first element whose code reaches into the damaged byte.
            let first = r.code_starts[1..].partition_point(|&end| end <= 8 * at as u64);
            let differs = |v: &[bf16]| -> Option<(usize, usize)> {
                let d: Vec<usize> = (0..v.len()).filter(|&i| v[i] != r.decoded[i]).collect();
                Some((*d.first()?, *d.last()?))
            };
            match &par {
                Err(d) => {
                    assert!(is_index_defect(d), "{case}: {d:?}");
                    outcomes[0] += 1;
                }
                Ok(v) => match differs(v) {
                    None => outcomes[2] += 1,
                    Some((lo, hi)) => {
                        outcomes[1] += 1;
                        let block = at / 4096;
                        let end = layout.output_positions[block + 1] as usize;
                        assert!(
                            lo >= first && hi < end,
                            "{case}: elements {lo}..={hi} differ, damage covers {first}..{end}"
                        );
                    }
                },
            }
            match &seq {
                Err(d) => assert!(matches!(d, UnitDefect::Stream(_)), "{case}: {d:?}"),
                Ok(v) => {
                    if let Some((lo, _)) = differs(v) {
                        assert!(
                            lo >= first,
                            "{case}: element {lo} differs, damage from {first}"
                        );
                    }
                }
            }
        }
        // Several flips at once, and a zeroed or 0xFF-filled stretch.
        for trial in 0..40 {
            let mut u = r.unit.clone();
            let what = match trial % 3 {
                0 => {
                    for _ in 0..rng.gen_range(2..20) {
                        let at = rng.gen_range(0..n_bytes);
                        u.encoded_exponent[at] ^= rng.gen_range(1..=255u8);
                    }
                    "several flips".to_string()
                }
                _ => {
                    let a = rng.gen_range(0..n_bytes);
                    let b = (a + rng.gen_range(1..600)).min(n_bytes);
                    let fill = if trial % 3 == 1 { 0 } else { 0xFF };
                    u.encoded_exponent[a..b].fill(fill);
                    format!("bytes {a}..{b} set to {fill:#04x}")
                }
            };
            let case = format!("seed {seed}: {}: {what}", r.name);
            let (par, seq) = decode_both(&u, &case).unwrap_or_else(|d| panic!("{case}: {d}"));
            for (which, res) in [("parallel", par), ("sequential", seq)] {
                if let Err(d) = res {
                    assert!(is_index_defect(&d), "{case}: {which}: {d:?}");
                }
            }
        }
    }
    eprintln!("seed {seed}: parallel decoder outcomes (error, ok but different, ok and equal): {outcomes:?}");
    assert!(
        outcomes[0] > 0,
        "seed {seed}: no corruption was detected at all"
    );
}

/// Damage in the folder itself: a flipped and a truncated bitstream.
#[test]
fn corrupted_bitstream_in_a_folder() {
    let original = original_layer();
    // Flip a byte in the middle of the stream.
    let c = copy_fixture();
    edit_field(&c.dir, "encoded_exponent", |t| t.data[10_000] ^= 0x5A);
    let model = open_ok(&c.dir, "flipped stream");
    match decode_layer(&model, "flipped stream") {
        Err(err) => {
            let d = unit_defect(&err, "flipped stream");
            assert!(is_index_defect(&d), "{d:?}");
        }
        Ok(v) => assert_eq!(v.len(), original.len()),
    }

    // Cut the last bytes off the stream: refused at open when the block count changes,
    // otherwise when the codes run past the end.
    for cut in [1usize, 3, 100] {
        let case = format!("stream cut by {cut} bytes");
        let c = copy_fixture();
        edit_field(&c.dir, "encoded_exponent", |t| {
            t.data.truncate(t.data.len() - cut);
            t.shape = vec![t.data.len()];
        });
        let d = match catch_unwind(|| Df11Model::open(&c.dir)) {
            Err(_) => panic!("{case}: open panicked"),
            Ok(Err(err)) => unit_defect(&err, &case),
            Ok(Ok(model)) => unit_defect(&decode_layer(&model, &case).expect_err(&case), &case),
        };
        assert!(is_index_defect(&d), "{case}: {d:?}");
    }
}
