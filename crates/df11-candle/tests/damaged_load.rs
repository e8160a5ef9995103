//! The CPU load path on damaged units: `ModelWeights` (weights kept compressed, or decoded at
//! load) and `Df11Backend` (the `VarBuilder` backend), not only `Df11Model::open`. Each of a
//! unit's six tensors truncated, and a corrupt bitstream: every loader returns a typed
//! `Df11Error` naming the unit (and, for what is found before decoding, the file), never a
//! panic, and an undamaged folder still loads in the same process afterwards.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use common::damage::*;
use df11_candle::{Df11Backend, Df11Error, Df11Model, ModelWeights, UnitDefect, WeightFormat};

/// The members of the damaged unit `model.layers.0` (qwen3-tiny) and their shapes.
const MEMBERS: [(&str, (usize, usize)); 7] = [
    ("self_attn.q_proj", (128, 128)),
    ("self_attn.k_proj", (64, 128)),
    ("self_attn.v_proj", (64, 128)),
    ("self_attn.o_proj", (128, 128)),
    ("mlp.gate_proj", (384, 128)),
    ("mlp.up_proj", (384, 128)),
    ("mlp.down_proj", (128, 384)),
];

/// One member, for `Df11Backend` (which decodes the whole unit).
const MODULE: &str = "model.layers.0.self_attn.q_proj";
const SHAPE: (usize, usize) = (128, 128);

/// What each loader made of a folder: `Err` with its error, or `Ok` when it loaded (and, for
/// weights kept compressed, ran a forward pass through every member) without one.
struct Outcomes {
    compressed: Result<(), Df11Error>,
    decoded_at_load: Result<(), Df11Error>,
    backend: Result<(), Df11Error>,
}

fn no_panic<T>(case: &str, what: &str, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| panic!("{case}: {what} panicked"))
}

/// Loads `dir` on the CPU every way a model can.
fn load_all(dir: &Path, case: &str) -> Outcomes {
    let cpu = Device::Cpu;
    let compressed = no_panic(case, "ModelWeights (compressed)", || {
        let w = ModelWeights::open(dir, WeightFormat::Df11, &cpu, DType::F32)?;
        // A forward pass decodes only its member's blocks, so the layer is used whole; a defect
        // found there comes back through candle.
        for (member, (rows, cols)) in MEMBERS {
            let l = w.linear(&format!("{UNIT}.{member}"), rows, cols, false)?;
            let x = Tensor::ones((1, cols), DType::F32, &cpu)?;
            l.forward(&x).map_err(|e| Df11Error::Usage(e.to_string()))?;
        }
        Ok(())
    });
    let decoded_at_load = no_panic(case, "ModelWeights (decoded at load)", || {
        // Each linear decodes its own member when it is made.
        let w = ModelWeights::open(dir, WeightFormat::Df11DecodedAtLoad, &cpu, DType::F32)?;
        for (member, (rows, cols)) in MEMBERS {
            w.linear(&format!("{UNIT}.{member}"), rows, cols, false)?;
        }
        Ok(())
    });
    let backend = no_panic(case, "Df11Backend", || {
        let b = Df11Backend::open(dir)?;
        let shape = candle_core::Shape::from(SHAPE);
        b.tensor(&format!("{MODULE}.weight"), Some(&shape), DType::F32, &cpu)
            .map(drop)
    });
    Outcomes {
        compressed,
        decoded_at_load,
        backend,
    }
}

/// Every loader refused the folder; each error names the unit (and, from `Df11Model::open`, the
/// file and the tensor or unit at fault, given in `needles`).
fn assert_all_refused(o: Outcomes, needles: &[&str], case: &str) {
    for (loader, r) in [
        ("ModelWeights (compressed)", o.compressed),
        ("ModelWeights (decoded at load)", o.decoded_at_load),
        ("Df11Backend", o.backend),
    ] {
        let err = r
            .err()
            .unwrap_or_else(|| panic!("{case}: {loader} loaded the damaged unit"));
        assert_mentions(&err, needles, &format!("{case}, {loader}"));
    }
}

/// A field of the unit cut short by `cut` elements, the file staying a valid safetensors file.
fn truncate(field: &str, cut: usize) -> FolderCopy {
    let c = copy_fixture();
    edit_field(&c.dir, field, |t| {
        let elem = t.dtype.bitsize() / 8;
        let row: usize = t.shape[1..].iter().product::<usize>() * elem;
        let keep = t.data.len() - cut * row;
        t.data.truncate(keep);
        t.shape[0] = keep / row;
    });
    c
}

/// Whether a defect is the one a case expects.
type DefectCheck = fn(&UnitDefect) -> bool;

#[test]
fn truncated_unit_tensors_are_refused_at_open_naming_file_and_unit() {
    // (field, rows cut, the defect Df11Model::open reports)
    let cases: [(&str, usize, DefectCheck); 5] = [
        ("sign_mantissa", 1, |d| {
            matches!(d, UnitDefect::OutputPositions(_))
        }),
        ("luts", 1, |d| {
            matches!(
                d,
                UnitDefect::LutPointer { .. }
                    | UnitDefect::LutShape(_)
                    | UnitDefect::LutCodeLength { .. }
            )
        }),
        ("gaps", 1, |d| matches!(d, UnitDefect::GapsLength { .. })),
        ("output_positions", 1, |d| {
            matches!(d, UnitDefect::OutputPositions(_))
        }),
        ("split_positions", 1, |d| {
            matches!(d, UnitDefect::SplitPositions(_))
        }),
    ];
    for (field, cut, expected) in cases {
        let case = format!("{UNIT}.{field} cut by {cut}");
        let c = truncate(field, cut);
        let err = open_err(&c.dir, &case);
        let d = unit_defect(&err, &case);
        assert!(expected(&d), "{case}: {d:?}");
        // Found before anything decodes: every loader says the same, file and unit.
        assert_all_refused(load_all(&c.dir, &case), &[UNIT_FILE, UNIT], &case);
    }
}

#[test]
fn truncated_bitstream_is_refused_by_every_loader() {
    for cut in [1usize, 7, 2000] {
        let case = format!("{UNIT}.encoded_exponent cut by {cut} bytes");
        let c = truncate("encoded_exponent", cut);
        // Refused at open when the block count changes, else when the codes run past the end.
        match no_panic(&case, "open", || Df11Model::open(&c.dir)) {
            Err(err) => {
                unit_defect(&err, &case);
            }
            Ok(model) => {
                let err = decode_layer(&model, &case).expect_err(&case);
                unit_defect(&err, &case);
            }
        }
        assert_all_refused(load_all(&c.dir, &case), &[UNIT], &case);
    }
}

#[test]
fn corrupt_bitstream_is_an_error_at_load_or_first_use() {
    // Zeroed bytes in the middle of the stream: the codes there no longer start where `gaps`
    // says (the fixture's codes are never all-zero runs that long).
    let c = copy_fixture();
    edit_field(&c.dir, "encoded_exponent", |t| t.data[8_000..8_400].fill(0));
    let case = "400 zeroed stream bytes";
    let model = open_ok(&c.dir, case);
    let d = unit_defect(&decode_layer(&model, case).expect_err(case), case);
    assert!(is_index_defect(&d), "{case}: {d:?}");
    let o = load_all(&c.dir, case);
    // Weights kept compressed load (nothing is decoded on the CPU until used); the forward pass
    // that decodes the member reports the defect.
    let err = o
        .compressed
        .expect_err("the forward pass decoded a corrupt member");
    assert_mentions(&err, &[UNIT], case);
    for (loader, r) in [
        ("decoded at load", o.decoded_at_load),
        ("Df11Backend", o.backend),
    ] {
        match r {
            Err(e @ Df11Error::InvalidUnit { .. }) => assert_mentions(&e, &[UNIT], case),
            other => panic!("{case}: {loader}: expected InvalidUnit, got {other:?}"),
        }
    }
}

#[test]
fn a_damaged_folder_leaves_the_process_able_to_load_others() {
    let c = truncate("gaps", 1);
    assert!(load_all(&c.dir, "gaps cut").compressed.is_err());
    let o = load_all(&fixture(), "the undamaged fixture after a damaged one");
    o.compressed.expect("compressed");
    o.decoded_at_load.expect("decoded at load");
    o.backend.expect("backend");
}
