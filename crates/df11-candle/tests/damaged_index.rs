//! Damaged index data (`output_positions`, `gaps`): refused at open or by the parallel decoder,
//! never a panic; the sequential decoder, which does not read them, still decodes exactly.
//!
//! Each case copies `tests/fixtures/models/qwen3-tiny/df11` into a temporary folder and damages
//! one thing (helpers: `common/damage.rs`). Random trials draw a fresh seed per run, printed in
//! the assertion messages; replay one with `DF11_TEST_SEED=<seed>`.

mod common;

use std::panic::catch_unwind;

use common::damage::*;
use common::seeded;
use df11_candle::{Df11Model, UnitDefect};
use half::bf16;
use rand::Rng;

// ---------------------------------------------------------------------------------------------
// Index data and bitstream: caught at open or when decoding.

/// Flipping an `output_positions` entry is refused at open, or by the parallel decoder.
#[test]
fn flipped_output_positions() {
    let cases: [(&str, PositionsEdit); 7] = [
        ("first entry 1", |v| v[0] = 1),
        ("middle entry + 1", |v| v[3] += 1),
        ("middle entry - 1", |v| v[3] -= 1),
        ("middle entry byte flipped", |v| v[5] ^= 0x0100),
        ("decreasing", |v| v.swap(2, 3)),
        ("last entry - 1", |v| *v.last_mut().unwrap() -= 1),
        ("an entry dropped", |v| {
            v.remove(4);
        }),
    ];
    let original = original_layer();
    for (case, edit) in cases {
        let c = copy_fixture();
        edit_field(&c.dir, "output_positions", |t| {
            let mut v = u32s(&t.data);
            edit(&mut v);
            t.data = u32_bytes(&v);
            t.shape = vec![t.data.len()];
        });
        let d = match catch_unwind(|| Df11Model::open(&c.dir)) {
            Err(_) => panic!("{case}: open panicked"),
            Ok(Err(err)) => unit_defect(&err, case),
            Ok(Ok(model)) => {
                // The sequential decoder does not read output_positions: still exact.
                let unit = model.unit(UNIT).unwrap();
                let mut seq = vec![bf16::ZERO; unit.layout.n_elements];
                model.decode_unit_sequential_into(unit, &mut seq).unwrap();
                assert!(seq == original, "{case}");
                let err = decode_layer(&model, case).expect_err(case);
                unit_defect(&err, case)
            }
        };
        assert!(matches!(d, UnitDefect::OutputPositions(_)), "{case}: {d:?}");
    }
}

/// Where the first code of each 64-bit window starts is checked by the parallel decoder.
#[test]
fn flipped_gaps_are_caught_by_the_parallel_decoder() {
    let original = original_layer();
    // A byte in the middle of block 2, and one at a block start.
    for at in [2 * 320 + 100, 5 * 320] {
        let case = format!("gaps[{at}] flipped");
        let c = copy_fixture();
        edit_field(&c.dir, "gaps", |t| t.data[at] ^= 0xFF);
        let model = open_ok(&c.dir, &case);
        let err = decode_layer(&model, &case).expect_err(&case);
        let d = unit_defect(&err, &case);
        assert!(is_index_defect(&d), "{case}: {d:?}");
        // The sequential decoder ignores gaps.
        let unit = model.unit(UNIT).unwrap();
        let mut seq = vec![bf16::ZERO; unit.layout.n_elements];
        model.decode_unit_sequential_into(unit, &mut seq).unwrap();
        assert!(seq == original, "{case}");
    }
}

/// Random flips of single `gaps` bytes inside the windows the codes use are always caught by
/// the parallel decoder; the sequential decoder ignores them.
#[test]
fn random_gaps_flips_are_always_caught() {
    let (seed, mut rng) = seeded("random_gaps_flips_are_always_caught");
    for r in references() {
        // The last window holding a code start; later windows (EOF tail, padding) are unused.
        let last_start = r.code_starts[r.code_starts.len() - 2];
        let last_window = (last_start / 64) as usize;
        // Bytes whose 8 bits all belong to windows 0..=last_window.
        let max_byte = (5 * (last_window + 1) - 8) / 8;
        let mut bytes: Vec<usize> = vec![0, 1, max_byte];
        bytes.extend((0..60).map(|_| rng.gen_range(0..=max_byte)));
        for at in bytes {
            let mask: u8 = rng.gen_range(1..=255);
            let case = format!("seed {seed}: {}: gaps[{at}] ^= {mask:#04x}", r.name);
            let mut u = r.unit.clone();
            u.gaps[at] ^= mask;
            let (par, seq) = decode_both(&u, &case).unwrap_or_else(|d| panic!("{case}: {d}"));
            match par {
                Ok(_) => panic!("{case}: damaged gaps decoded without error"),
                Err(d) => assert!(is_index_defect(&d), "{case}: {d:?}"),
            }
            assert!(
                seq.unwrap() == r.decoded,
                "{case}: the sequential decoder read gaps"
            );
        }
        // Bits of window 0: the first code starts at bit 0.
        for g in 1..32u8 {
            let case = format!("{}: window 0 gap {g}", r.name);
            let mut u = r.unit.clone();
            u.gaps[0] = (u.gaps[0] & 0x07) | (g << 3);
            let (par, _) = decode_both(&u, &case).unwrap();
            assert!(
                matches!(&par, Err(d) if is_index_defect(d)),
                "{case}: {:?}",
                par.map(|v| v == r.decoded)
            );
        }
    }
}

/// Random flips of `output_positions` bytes are refused at validation or by the parallel
/// decoder.
#[test]
fn random_output_positions_flips_are_always_caught() {
    let (seed, mut rng) = seeded("random_output_positions_flips_are_always_caught");
    for r in references() {
        for _ in 0..60 {
            let at = rng.gen_range(0..r.unit.output_positions.len());
            let mask: u8 = rng.gen_range(1..=255);
            let case = format!(
                "seed {seed}: {}: output_positions[{at}] ^= {mask:#04x}",
                r.name
            );
            let mut u = r.unit.clone();
            u.output_positions[at] ^= mask;
            match decode_both(&u, &case) {
                Err(d) => assert!(matches!(d, UnitDefect::OutputPositions(_)), "{case}: {d:?}"),
                Ok((par, seq)) => {
                    assert!(
                        matches!(&par, Err(UnitDefect::OutputPositions(_))),
                        "{case}: {:?}",
                        par.map(|v| v == r.decoded)
                    );
                    assert!(seq.unwrap() == r.decoded, "{case}");
                }
            }
        }
    }
}
