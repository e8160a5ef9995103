//! Units at the edges of the format, decoded on the test device (the CPU in CI, CUDA in the GPU
//! suite) through `Df11Group`: the real Qwen3-4B slice (whose `output_positions` has NB entries,
//! not NB + 1), 32-bit codes with 4-level LUT chains, blocks of more than 16,384 and up to 32,768
//! elements, a unit of one element. Block-range decodes are checked too.

mod common;

use candle_core::Device;
use df11_candle::{encode_unit, synth, Df11Group, ExponentForm, UnitLayout, UnitTensors};
use half::bf16;

/// Decodes the unit in both device forms of its exponents (the same path twice on the CPU).
fn decode_on(device: &Device, t: &UnitTensors<'_>, expected: &[u8]) -> UnitLayout {
    let layout = UnitLayout::validate(t).unwrap();
    for form in [ExponentForm::Packed, ExponentForm::Huffman] {
        decode_in(form, device, t, &layout, expected);
    }
    layout
}

fn decode_in(
    form: ExponentForm,
    device: &Device,
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    expected: &[u8],
) {
    let placement = df11_candle::UnitPlacement {
        options: df11_candle::Df11Options {
            exponents: form,
            ..common::options()
        },
        ..Default::default()
    };
    let names = vec!["stress.weight".into()];
    let g = Df11Group::new("stress", names, t, layout.clone(), device, &placement).unwrap();
    assert_eq!(
        g.is_packed(),
        device.is_cuda() && form == ExponentForm::Packed
    );
    let out: Vec<bf16> = g.decode().unwrap().to_vec1().unwrap();
    assert!(
        bytemuck::cast_slice::<bf16, u8>(&out) == expected,
        "whole-unit decode differs"
    );
    // Every single block, and a range in the middle, decoded alone.
    let nb = layout.n_blocks;
    let ranges = [
        (0, 1),
        (nb / 2, nb),
        (nb.saturating_sub(1), nb),
        (1.min(nb), (nb / 2 + 1).min(nb)),
    ];
    for (a, b) in ranges {
        if a >= b {
            continue;
        }
        let (t2, base) = g.decode_blocks(a..b).unwrap();
        let (p0, p1) = (
            layout.output_positions[a] as usize,
            layout.output_positions[b] as usize,
        );
        let got: Vec<bf16> = t2.narrow(0, p0 - base, p1 - p0).unwrap().to_vec1().unwrap();
        assert!(
            bytemuck::cast_slice::<bf16, u8>(&got) == &expected[2 * p0..2 * p1],
            "blocks {a}..{b} differ"
        );
    }
    // Element ranges (on CUDA: the segment kernel), whole and odd-sized.
    let n = layout.n_elements;
    for (a, b) in [
        (0, n),
        (n / 3, n / 3 + (n / 2).min(5000)),
        (n.saturating_sub(7), n),
    ] {
        let got: Vec<bf16> = g.decode_elements(a..b).unwrap().to_vec1().unwrap();
        assert!(
            bytemuck::cast_slice::<bf16, u8>(&got) == &expected[2 * a..2 * b],
            "elements {a}..{b} differ"
        );
    }
    g.check_status().unwrap();
}

fn encode_and_decode(device: &Device, w: &[bf16]) -> UnitLayout {
    let enc = encode_unit(&[bytemuck::cast_slice(w)]).unwrap();
    decode_on(device, &enc.tensors(), bytemuck::cast_slice(w))
}

#[test]
fn real_qwen3_4b_slice_decodes_on_the_device() {
    let idx = common::canary_index();
    let t = common::canary_unit(&idx);
    let get = |n: &str| idx.get(n).unwrap().data;
    let layout = decode_on(&common::device(), &t, get("expected_bf16"));
    assert_eq!((layout.n_blocks, layout.max_code_length), (5, 27));
}

#[test]
fn thirty_two_bit_codes_and_four_level_luts_decode_on_the_device() {
    let w = synth::fibonacci_exponents(34, common::seed());
    let layout = encode_and_decode(&common::device(), &w);
    assert_eq!(layout.max_code_length, 32);
    assert!(layout.lut_rows >= 5, "{} LUT rows", layout.lut_rows);
}

#[test]
fn dense_blocks_decode_on_the_device() {
    let device = common::device();
    let layout = encode_and_decode(
        &device,
        &synth::one_exponent_mostly(150_000, common::seed()),
    );
    assert!(
        layout.max_block_elements > 16_384,
        "{}",
        layout.max_block_elements
    );
    let one = vec![bf16::from_f32(-0.75); 70_001];
    let layout = encode_and_decode(&device, &one);
    assert_eq!(layout.max_block_elements, 32_768);
}

#[test]
fn tiny_and_odd_units_decode_on_the_device() {
    let device = common::device();
    let s = common::seed();
    encode_and_decode(&device, &synth::normal_bf16(1, 0.02, s));
    encode_and_decode(&device, &synth::normal_bf16(4097, 0.02, s));
    encode_and_decode(&device, &synth::normal_bf16(300_001, 0.02, s));
}
