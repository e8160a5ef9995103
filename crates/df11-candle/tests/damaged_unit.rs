//! Damaged units: a missing tensor, a wrong dtype or shape, and every invariant checked at open
//! reports its own error variant and `UnitDefect`, names the file and the unit, and never panics.
//!
//! Each case copies `tests/fixtures/models/qwen3-tiny/df11` into a temporary folder and damages
//! one thing (helpers: `common/damage.rs`). Random trials draw a fresh seed per run, printed in
//! the assertion messages; replay one with `DF11_TEST_SEED=<seed>`.

mod common;

use common::damage::*;
use df11_candle::{Df11Error, UnitDefect};
use safetensors::Dtype;

// ---------------------------------------------------------------------------------------------
// Tensors of a unit: presence, dtype, shape.

#[test]
fn missing_unit_tensor() {
    for field in ["gaps", "encoded_exponent", "split_positions", "luts"] {
        let case = format!("{UNIT}.{field} dropped");
        let c = copy_fixture();
        let name = format!("{UNIT}.{field}");
        rewrite(&c.dir, UNIT_FILE, |ts| ts.retain(|t| t.name != name));
        let err = open_err(&c.dir, &case);
        match &err {
            Df11Error::MissingTensor { path, tensor } => {
                assert_eq!(tensor, &name, "{case}");
                assert_eq!(file_name(path), UNIT_FILE, "{case}: {err}");
            }
            other => panic!("{case}: expected MissingTensor, got {other:?}"),
        }
        assert_mentions(&err, &[&name, UNIT_FILE], &case);
    }
}

#[test]
fn wrong_dtypes() {
    let cases: [(&str, Dtype, Dtype); 4] = [
        ("sign_mantissa", Dtype::I8, Dtype::U8),
        ("encoded_exponent", Dtype::I8, Dtype::U8),
        ("output_positions", Dtype::U32, Dtype::U8),
        ("split_positions", Dtype::U64, Dtype::I64),
    ];
    for (field, to, expected) in cases {
        let case = format!("{field} as {to:?}");
        let c = copy_fixture();
        edit_field(&c.dir, field, |t| {
            t.dtype = to;
            let size = to.bitsize() / 8;
            let n = t.data.len() / size;
            t.data.truncate(n * size);
            t.shape = vec![n];
        });
        let err = open_err(&c.dir, &case);
        let name = format!("{UNIT}.{field}");
        match &err {
            Df11Error::WrongDtype {
                path,
                tensor,
                expected: e,
                found,
            } => {
                assert_eq!(tensor, &name, "{case}");
                assert_eq!(file_name(path), UNIT_FILE, "{case}");
                assert_eq!(e, &format!("{expected:?}"), "{case}");
                assert_eq!(found, &format!("{to:?}"), "{case}");
            }
            other => panic!("{case}: expected WrongDtype, got {other:?}"),
        }
        assert_mentions(&err, &[&name, UNIT_FILE], &case);
    }
}

#[test]
fn luts_with_a_wrong_shape() {
    let name = format!("{UNIT}.luts");
    let cases: [(&str, TensorEdit); 3] = [
        ("[K, 255]", |t| {
            let k = t.shape[0];
            t.data = t.data.chunks(256).flat_map(|r| r[..255].to_vec()).collect();
            t.shape = vec![k, 255];
        }),
        ("[K * 256]", |t| t.shape = vec![t.data.len()]),
        ("[K, 16, 16]", |t| t.shape = vec![t.shape[0], 16, 16]),
    ];
    for (case, edit) in cases {
        let c = copy_fixture();
        edit_field(&c.dir, "luts", edit);
        let err = open_err(&c.dir, case);
        match &err {
            Df11Error::WrongShape { path, tensor, .. } => {
                assert_eq!(tensor, &name, "{case}");
                assert_eq!(file_name(path), UNIT_FILE, "{case}");
            }
            other => panic!("{case}: expected WrongShape, got {other:?}"),
        }
        assert_mentions(&err, &[&name, UNIT_FILE], case);
    }
    // Other unit tensors must be 1-D.
    let c = copy_fixture();
    edit_field(&c.dir, "gaps", |t| t.shape = vec![t.data.len() / 2, 2]);
    let err = open_err(&c.dir, "2-D gaps");
    assert!(
        matches!(&err, Df11Error::WrongShape { tensor, .. } if tensor == "model.layers.0.gaps"),
        "{err:?}"
    );
    assert_mentions(&err, &["model.layers.0.gaps", UNIT_FILE], "2-D gaps");
}

// ---------------------------------------------------------------------------------------------
// Unit invariants checked at open (`UnitDefect`).

#[test]
fn luts_row_count_out_of_range() {
    for rows in [1usize, 19, 40] {
        let case = format!("luts with {rows} rows");
        let c = copy_fixture();
        edit_field(&c.dir, "luts", |t| {
            let k = t.shape[0];
            let lengths = t.data[(k - 1) * 256..].to_vec();
            if rows < k {
                t.data.truncate(rows * 256);
            } else {
                // Extra decode rows (copies of row 0) before the length row.
                let row0 = t.data[..256].to_vec();
                t.data.truncate((k - 1) * 256);
                while t.data.len() < (rows - 1) * 256 {
                    t.data.extend_from_slice(&row0);
                }
                t.data.extend_from_slice(&lengths);
            }
            t.shape = vec![rows, 256];
        });
        let err = open_err(&c.dir, &case);
        let d = unit_defect(&err, &case);
        assert!(matches!(d, UnitDefect::LutShape(_)), "{case}: {d:?}");
    }
}

#[test]
fn luts_pointer_to_a_missing_row() {
    let k = {
        let (ts, _) = read_tensors(&fixture().join(UNIT_FILE));
        ts.iter()
            .find(|t| t.name == format!("{UNIT}.luts"))
            .unwrap()
            .shape[0]
    };
    // 256 - (K - 1) points at the length row, 240 at row 16: neither is a decode row.
    for (row, index, value) in [
        (0usize, 0usize, (256 - (k - 1)) as u8),
        (0, 200, 240),
        (1, 255, 241),
    ] {
        let case = format!("luts[{row}][{index}] = {value} (K = {k})");
        let c = copy_fixture();
        edit_field(&c.dir, "luts", |t| t.data[row * 256 + index] = value);
        let err = open_err(&c.dir, &case);
        let d = unit_defect(&err, &case);
        assert_eq!(d, UnitDefect::LutPointer { row, index, value }, "{case}");
    }
}

#[test]
fn luts_symbol_with_a_bad_code_length() {
    let (ts, _) = read_tensors(&fixture().join(UNIT_FILE));
    let luts = &ts
        .iter()
        .find(|t| t.name == format!("{UNIT}.luts"))
        .unwrap()
        .data;
    let k = luts.len() / 256;
    let symbol = luts[0];
    assert!(symbol < 240 && luts[(k - 1) * 256 + symbol as usize] > 0);
    for length in [0u8, 33, 255] {
        let case = format!("symbol {symbol} with code length {length}");
        let c = copy_fixture();
        edit_field(&c.dir, "luts", |t| {
            t.data[(k - 1) * 256 + symbol as usize] = length
        });
        let err = open_err(&c.dir, &case);
        let d = unit_defect(&err, &case);
        assert_eq!(d, UnitDefect::LutCodeLength { symbol, length }, "{case}");
    }
}

#[test]
fn split_positions_not_increasing_or_miscounted() {
    let cases: [(&str, SplitEdit); 6] = [
        ("two entries swapped", |v, _| v.swap(1, 2)),
        ("a repeated entry", |v, _| v[3] = v[2]),
        ("a zero first entry", |v, _| v[0] = 0),
        ("a negative entry", |v, _| v[0] = -1),
        ("an entry at N", |v, n| *v.last_mut().unwrap() = n),
        ("one entry dropped", |v, _| {
            v.pop();
        }),
    ];
    for (case, edit) in cases {
        let c = copy_fixture();
        let n = original_layer().len() as i64;
        edit_field(&c.dir, "split_positions", |t| {
            let mut v = i64s(&t.data);
            edit(&mut v, n);
            t.data = i64_bytes(&v);
            t.shape = vec![v.len()];
        });
        let err = open_err(&c.dir, case);
        let d = unit_defect(&err, case);
        assert!(matches!(d, UnitDefect::SplitPositions(_)), "{case}: {d:?}");
    }
}

#[test]
fn gaps_too_short() {
    let c = copy_fixture();
    let mut expected = 0;
    edit_field(&c.dir, "gaps", |t| {
        expected = t.data.len();
        t.data.pop();
        t.shape = vec![t.data.len()];
    });
    let err = open_err(&c.dir, "gaps one byte short");
    let d = unit_defect(&err, "gaps one byte short");
    assert_eq!(
        d,
        UnitDefect::GapsLength {
            expected_at_least: expected,
            found: expected - 1
        }
    );
    assert_eq!(expected % 320, 0);
}

#[test]
fn empty_bitstream_is_a_size_defect() {
    let c = copy_fixture();
    edit_field(&c.dir, "encoded_exponent", |t| {
        t.data.clear();
        t.shape = vec![0];
    });
    let err = open_err(&c.dir, "empty encoded_exponent");
    let d = unit_defect(&err, "empty encoded_exponent");
    assert!(matches!(d, UnitDefect::Size(_)), "{d:?}");
}

#[test]
fn unit_matching_no_pattern() {
    let c = copy_fixture();
    rewrite(&c.dir, UNIT_FILE, |ts| {
        for t in ts.iter_mut() {
            if let Some(field) = t.name.strip_prefix(&format!("{UNIT}.")) {
                if df11_candle::unit::UNIT_FIELDS.contains(&field) {
                    t.name = format!("foo.bar.{field}");
                }
            }
        }
    });
    let err = open_err(&c.dir, "unit foo.bar");
    match &err {
        Df11Error::UnmatchedUnit { path, unit } => {
            assert_eq!(unit, "foo.bar");
            assert_eq!(file_name(path), UNIT_FILE);
        }
        other => panic!("expected UnmatchedUnit, got {other:?}"),
    }
    assert_mentions(&err, &["foo.bar", UNIT_FILE], "unit foo.bar");
}

#[test]
fn unit_matching_two_patterns() {
    let c = copy_fixture();
    edit_config(&c.dir, |v| {
        let dict = v["dfloat11_config"]["pattern_dict"]
            .as_object_mut()
            .unwrap();
        let members = dict["model.layers.\\d+"].clone();
        dict.insert("model\\.layers\\.0".into(), members);
    });
    let err = open_err(&c.dir, "ambiguous");
    match &err {
        Df11Error::AmbiguousUnit {
            path,
            unit,
            patterns,
        } => {
            assert_eq!(unit, UNIT);
            assert_eq!(file_name(path), UNIT_FILE);
            assert_eq!(patterns.len(), 2, "{patterns:?}");
        }
        other => panic!("expected AmbiguousUnit, got {other:?}"),
    }
    assert_mentions(&err, &[UNIT, UNIT_FILE], "ambiguous");
}

/// A model whose original has other member sizes is refused by verify with `MemberSizes`.
#[test]
fn member_sizes_that_do_not_tile_the_unit() {
    let tmp = common::temp_dir();
    let bf16_dir = tmp.path().join("bf16");
    std::fs::create_dir(&bf16_dir).unwrap();
    for e in std::fs::read_dir(common::model_dir("qwen3-tiny", "bf16"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(e.path(), bf16_dir.join(e.file_name())).unwrap();
    }
    rewrite(&bf16_dir, "model.safetensors", |ts| {
        let q = ts
            .iter_mut()
            .find(|t| t.name == "model.layers.0.self_attn.q_proj.weight")
            .unwrap();
        q.shape[0] -= 1;
        q.data.truncate(q.shape.iter().product::<usize>() * 2);
    });
    let err = df11_candle::verify_model(&fixture(), &bf16_dir, |_| {}).expect_err("verify");
    let d = match &err {
        Df11Error::InvalidUnit { unit, path, defect } => {
            assert_eq!(unit, UNIT);
            assert_eq!(file_name(path), UNIT_FILE);
            defect.clone()
        }
        other => panic!("expected InvalidUnit, got {other:?}"),
    };
    assert!(matches!(d, UnitDefect::MemberSizes { .. }), "{d:?}");
    assert_mentions(&err, &[UNIT, UNIT_FILE], "member sizes");
}
