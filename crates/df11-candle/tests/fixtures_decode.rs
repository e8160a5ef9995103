//! Every unit of every bundled fixture, and the real Qwen3-4B slice, decode byte for byte to the
//! BF16 originals, with both CPU decoders.

mod common;

use df11_candle::{
    decode_parallel, decode_sequential, DecodeTable, Df11Model, SafetensorsIndex, UnitLayout,
};
use half::bf16;

fn bytes_of(v: &[bf16]) -> &[u8] {
    bytemuck::cast_slice(v)
}

#[test]
fn every_fixture_unit_decodes_exactly_with_both_decoders() {
    for name in common::MODELS {
        let model = Df11Model::open(common::model_dir(name, "df11")).unwrap();
        let original = SafetensorsIndex::open_dir(&common::model_dir(name, "bf16")).unwrap();
        assert!(!model.units().is_empty(), "{name}: no units");
        for unit in model.units() {
            let numels: Vec<usize> = unit
                .members
                .iter()
                .map(|m| original.get(m).unwrap().shape.iter().product())
                .collect();
            unit.layout.check_members(&numels).unwrap();
            let mut seq = vec![bf16::ZERO; unit.layout.n_elements];
            let mut par = vec![bf16::from_f32(1.0); unit.layout.n_elements];
            model.decode_unit_sequential_into(unit, &mut seq).unwrap();
            model.decode_unit_into(unit, &mut par).unwrap();
            assert_eq!(bytes_of(&seq), bytes_of(&par), "{name} {}", unit.name);
            for (i, m) in unit.members.iter().enumerate() {
                let r = unit.member_range(i);
                assert!(
                    bytes_of(&seq[r]) == original.get(m).unwrap().data,
                    "{name}: {m} differs from the original"
                );
            }
        }
    }
}

#[test]
fn every_fixture_verifies_ok() {
    for name in common::MODELS {
        let r = df11_candle::verify_model(
            &common::model_dir(name, "df11"),
            &common::model_dir(name, "bf16"),
            |_| {},
        )
        .unwrap();
        assert!(r.is_ok(), "{name}: {:?}", r.difference);
        assert!(
            r.units >= 2 && r.weights > 0 && r.plain_tensors > 0,
            "{name}: {r:?}"
        );
    }
}

#[test]
fn real_qwen3_4b_slice_decodes_exactly() {
    let idx = common::canary_index();
    let t = common::canary_unit(&idx);
    let get = |n: &str| idx.get(n).unwrap().data;
    let layout = UnitLayout::validate(&t).unwrap();
    // The slice's edge case: 5 blocks by byte count, 5 positions entries.
    assert_eq!(layout.n_blocks, 5);
    assert_eq!(layout.output_positions.len(), 6);
    assert_eq!(layout.n_elements, 46096);
    assert_eq!(layout.lut_rows, 5);
    assert_eq!(layout.max_code_length, 27);
    let table = DecodeTable::new(t.luts);
    let expected = get("expected_bf16");
    let mut seq = vec![bf16::ZERO; layout.n_elements];
    decode_sequential(&t, &layout, &table, &mut seq).unwrap();
    assert!(bytes_of(&seq) == expected);
    let mut par = vec![bf16::ZERO; layout.n_elements];
    decode_parallel(&t, &layout, &table, &mut par).unwrap();
    assert!(bytes_of(&par) == expected);
}

/// What a budget counts a unit at ([`ModelWeights::device_bytes_bound`]) is never less than the
/// device form a load builds for it: the packed form with `sign_mantissa` where it fits (as
/// `auto` keeps it), else the file's Huffman form with its segment index.
#[test]
fn the_device_bound_covers_the_built_forms() {
    use df11_candle::packed::unit_exponents;
    use df11_candle::{ModelWeights, PackedExponents, SegmentIndex, WeightFormat};
    for name in common::MODELS {
        let dir = common::model_dir(name, "df11");
        let weights = ModelWeights::open(
            &dir,
            WeightFormat::Df11,
            &candle_core::Device::Cpu,
            candle_core::DType::F32,
        )
        .unwrap();
        let bounds: std::collections::HashMap<String, usize> =
            weights.device_bytes_bound().into_iter().collect();
        let stored: std::collections::HashMap<String, usize> =
            weights.stored_bytes().into_iter().collect();
        let model = Df11Model::open(&dir).unwrap();
        for unit in model.units() {
            let first = &unit.members[0];
            let bound = bounds[first];
            assert!(
                bound >= stored[first],
                "{name} {}: below the file",
                unit.name
            );
            let t = model.unit_tensors(unit).unwrap();
            let table = DecodeTable::new(t.luts);
            let n = unit.layout.n_elements;
            let exponents = unit_exponents(&t, &unit.layout, &table).unwrap();
            let packed = PackedExponents::build(&exponents, &unit.layout.member_ranges());
            if let Some(p) = packed.filter(PackedExponents::fits) {
                // The padding PackedHost adds to the escape list included.
                let bytes = p.device_bytes() + 20 + n;
                assert!(
                    bound >= bytes,
                    "{name} {}: {bound} < packed {bytes}",
                    unit.name
                );
            }
            if let Some(index) = SegmentIndex::build(&t, &unit.layout, &table).unwrap() {
                let bytes = stored[first] + index.device_bytes();
                assert!(
                    bound >= bytes,
                    "{name} {}: {bound} < Huffman {bytes}",
                    unit.name
                );
            }
        }
    }
}
