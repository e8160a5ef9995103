//! Small-batch products on the test device (the CPU in CI, CUDA in the GPU suite).
//!
//! On CUDA, batches of up to 8 rows take the fused DF11 decode + matrix-vector kernel, and dense
//! BF16 weights its twin: the two must be bit-identical, for every fixture matrix and for shapes
//! the fixtures lack (members not starting on a 64-element segment, rows spanning three chunks,
//! 32-bit codes), and both must be within rounding distance of an f64 reference computed here
//! on the host (so a bug shared by both kernels is caught too). The segment decode kernel must
//! give the original bytes. On the CPU the same comparisons run through the CPU path.

mod common;

use candle_core::{DType, Device, Module};
use common::products::{bits, check_against_reference, random_x, unit_of};
use df11_candle::{
    encode_unit, synth, Df11Group, Df11Linear, Df11Model, ExponentForm, FusedKernel, Linear,
    ModelWeights, SafetensorsIndex, UnitLayout, WeightFormat,
};
use half::bf16;
use rand::{Rng, SeedableRng};

/// Both device forms of the exponents (on the CPU the form is ignored: the same path twice).
const FORMS: [ExponentForm; 2] = [ExponentForm::Packed, ExponentForm::Huffman];

/// The test's options with the exponents in `form`.
fn with_form(form: ExponentForm) -> df11_candle::Df11Options {
    df11_candle::Df11Options {
        exponents: form,
        ..common::options()
    }
}

#[test]
fn df11_and_bf16_linears_agree_at_small_batches_on_every_fixture_matrix() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    for name in common::MODELS {
        let model = Df11Model::open(common::model_dir(name, "df11")).unwrap();
        let original = SafetensorsIndex::open_dir(&common::model_dir(name, "bf16")).unwrap();
        let dense = ModelWeights::open_with(
            &common::model_dir(name, "bf16"),
            WeightFormat::Dense,
            &device,
            DType::BF16,
            common::options(),
        )
        .unwrap();
        for unit in model.units() {
            for form in FORMS {
                let placement = df11_candle::UnitPlacement {
                    options: with_form(form),
                    ..Default::default()
                };
                let g = Df11Group::load(&model, unit, &device, &placement).unwrap();
                assert_eq!(
                    g.is_packed(),
                    device.is_cuda() && form == ExponentForm::Packed
                );
                for (member, weight) in unit.members.iter().enumerate() {
                    let module = weight.strip_suffix(".weight").unwrap();
                    let t = original.get(weight).unwrap();
                    let (rows, cols) = (t.shape[0], t.shape[1]);
                    let w: &[bf16] = bytemuck::cast_slice(t.data);
                    let bias_name = format!("{module}.bias");
                    let bias = original
                        .contains(&bias_name)
                        .then(|| dense.tensor(&bias_name, &[rows]).unwrap());
                    let has_bias = bias.is_some();
                    let a =
                        Df11Linear::new(g.clone(), member, rows, cols, bias, DType::BF16).unwrap();
                    let b = dense.linear(module, rows, cols, has_bias).unwrap();
                    assert!(matches!(b, Linear::Dense { .. }));
                    for batch in 1..=9 {
                        let (xh, x) = random_x(&mut rng, batch, cols, &device);
                        let (ya, yb) = (a.forward(&x).unwrap(), b.forward(&x).unwrap());
                        let what = format!("{name} {module} {form:?} batch {batch}");
                        assert!(bits(&ya) == bits(&yb), "{what}");
                        if !has_bias {
                            check_against_reference(&ya, &xh, w, rows, cols, &what);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn odd_shapes_agree_with_the_twin_and_the_reference() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // m1 starts at element 24 (not a segment boundary) and its 4104-column rows start anywhere
    // in a segment and span three chunks; m2 has 12288 columns (six chunks); m3 is one short row.
    let shapes = [(3, 8), (37, 4104), (5, 12288), (1, 40)];
    for form in FORMS {
        odd_shapes_in(form, &shapes, &mut rng, &device);
    }
}

fn odd_shapes_in(
    form: ExponentForm,
    shapes: &[(usize, usize)],
    rng: &mut impl Rng,
    device: &Device,
) {
    let (w, g) = unit_of(shapes, rng.gen(), device, with_form(form));
    let mut at = 0;
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let wm = &w[at..at + rows * cols];
        // The segment decode kernel (CUDA) / CPU decoder: the original bytes.
        let got: Vec<bf16> = g
            .decode_elements(at..at + rows * cols)
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!(got == wm, "member {i} {form:?}: decode differs");
        at += rows * cols;
        let fused = Df11Linear::new(g.clone(), i, rows, cols, None, DType::BF16).unwrap();
        let twin = fused.clone().decoded().unwrap();
        for batch in [1, 2, 3, 4, 5, 8, 13] {
            let (xh, x) = random_x(rng, batch, cols, device);
            let (ya, yb) = (fused.forward(&x).unwrap(), twin.forward(&x).unwrap());
            assert!(
                bits(&ya) == bits(&yb),
                "member {i} [{rows}, {cols}] {form:?} batch {batch}"
            );
            check_against_reference(
                &ya,
                &xh,
                wm,
                rows,
                cols,
                &format!("member {i} {form:?} batch {batch}"),
            );
        }
    }
    g.check_status().unwrap();
}

/// Checks decode and fused == twin for the weights `w` seen as a `[_, cols]` matrix.
fn check_unit(w: &[bf16], cols: usize, rng: &mut impl Rng, device: &Device, what: &str) {
    let rows = w.len() / cols;
    let w = &w[..rows * cols];
    let enc = encode_unit(&[bytemuck::cast_slice(w)]).unwrap();
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    for form in FORMS {
        let (name, layout) = (vec![format!("{what}.weight")], layout.clone());
        let placement = df11_candle::UnitPlacement {
            options: with_form(form),
            ..Default::default()
        };
        let g = Df11Group::new(what, name, &t, layout, device, &placement).unwrap();
        let got: Vec<bf16> = g.decode_elements(0..w.len()).unwrap().to_vec1().unwrap();
        assert!(
            bytemuck::cast_slice::<bf16, u16>(&got) == bytemuck::cast_slice::<bf16, u16>(w),
            "{what} {form:?}: decode differs"
        );
        let fused = Df11Linear::new(g.clone(), 0, rows, cols, None, DType::BF16).unwrap();
        let twin = fused.clone().decoded().unwrap();
        for batch in [1, 4, 8] {
            let (_, x) = random_x(rng, batch, cols, device);
            let (ya, yb) = (fused.forward(&x).unwrap(), twin.forward(&x).unwrap());
            assert!(bits(&ya) == bits(&yb), "{what} {form:?}: batch {batch}");
        }
        g.check_status().unwrap();
    }
}

#[test]
fn long_and_one_bit_codes_agree_with_the_twin() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // Exponents with Fibonacci frequencies: codes up to 32 bits, 4-level LUT chains.
    let w = synth::fibonacci_exponents(34, rng.gen());
    check_unit(&w, 8 * 37, &mut rng, &device, "fibonacci");
    // Nearly all one exponent: 1-bit codes, three symbols per table entry.
    let w = synth::one_exponent_mostly(150_000, rng.gen());
    check_unit(&w, 200, &mut rng, &device, "one-exponent");
}

#[test]
fn packed_units_with_many_escapes_agree_with_the_twin() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // ~6% of the weights scaled down by 2^-8..2^-19: exponents outside the top seven, so a lane
    // often has more than the 8 escapes it fetches at once, and rows of 2056 columns start
    // mid-chunk (escapes counted across two chunks).
    let mut w = synth::normal_bf16(2056 * 40, 0.02, rng.gen());
    for v in &mut w {
        if rng.gen_bool(0.06) {
            *v = bf16::from_f32(v.to_f32() * (-(rng.gen_range(8..20) as f32)).exp2());
        }
    }
    let enc = encode_unit(&[bytemuck::cast_slice(&w)]).unwrap();
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    let placement = df11_candle::UnitPlacement {
        options: with_form(ExponentForm::Packed),
        ..Default::default()
    };
    let names = vec!["escapes.weight".into()];
    let g = Df11Group::new("escapes", names, &t, layout, &device, &placement).unwrap();
    assert_eq!(g.is_packed(), device.is_cuda(), "the unit should pack");
    check_unit(&w, 2056, &mut rng, &device, "many-escapes");
}

#[test]
fn the_fused_path_is_taken_exactly_on_cuda() {
    let device = common::device();
    let (_, g) = unit_of(&[(16, 64)], 1, &device, with_form(ExponentForm::Huffman));
    assert_eq!(g.has_segment_index(), device.is_cuda());
    assert!(!g.is_packed());
    assert_eq!(g.can_fuse(0, 64), device.is_cuda());
    let (_, p) = unit_of(&[(16, 64)], 1, &device, with_form(ExponentForm::Packed));
    assert_eq!(p.is_packed(), device.is_cuda());
    assert!(!p.has_segment_index());
    assert_eq!(p.can_fuse(0, 64), device.is_cuda());
    assert!(!g.can_fuse(4, 64) && !g.can_fuse(0, 60));
    use df11_candle::matmul::{fused_plan, FUSED_MAX_ROWS, TC_MAX_ROWS, TC_MIN_ROWS};
    let on_cuda = |k| device.is_cuda().then_some(k);
    use df11_candle::{Df11Options, TileMembers};
    let tiles = |tiles| Df11Options {
        tiles,
        ..Df11Options::default()
    };
    let (chunked, all, off) = (
        tiles(TileMembers::Chunked),
        tiles(TileMembers::All),
        tiles(TileMembers::Off),
    );
    // Columns that are not whole 256-column passes: the CUDA-core kernels, up to 4 rows.
    assert_eq!(
        fused_plan(1, 64, &device, &chunked),
        on_cuda(FusedKernel::CudaCore)
    );
    assert_eq!(fused_plan(FUSED_MAX_ROWS + 1, 64, &device, &chunked), None);
    // Whole passes: the tensor cores (the GPU suite runs on sm_90) up to 16 rows, from 1 row for
    // the widths units tile (by default whole 2048-column chunks), else from 3.
    let tc = on_cuda(FusedKernel::TensorCore);
    let cc = on_cuda(FusedKernel::CudaCore);
    assert_eq!(fused_plan(1, 2048, &device, &chunked), tc);
    assert_eq!(fused_plan(1, 256, &device, &chunked), cc);
    assert_eq!(fused_plan(TC_MIN_ROWS - 1, 5120, &device, &chunked), cc);
    assert_eq!(fused_plan(1, 256, &device, &all), tc);
    assert_eq!(fused_plan(1, 2048, &device, &off), cc);
    assert_eq!(fused_plan(TC_MIN_ROWS, 256, &device, &chunked), tc);
    assert_eq!(fused_plan(TC_MAX_ROWS, 4096, &device, &chunked), tc);
    // Off the tensor cores where the options say so; never fused on the decode path.
    let no_tc = Df11Options {
        tensor_cores: false,
        ..chunked
    };
    assert_eq!(fused_plan(TC_MIN_ROWS, 256, &device, &no_tc), cc);
    let decode = Df11Options {
        matmul: df11_candle::MatmulPath::Decode,
        ..chunked
    };
    assert_eq!(fused_plan(1, 2048, &device, &decode), None);
    assert_eq!(fused_plan(TC_MAX_ROWS + 1, 4096, &device, &chunked), None);
}
