//! Helpers of the product tests (`fused_exact.rs`, `tc_exact.rs`): random inputs, synthetic
//! units, and the check against an f64 reference computed on the host.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use df11_candle::{encode_unit, synth, Df11Group, Df11Options, UnitLayout};
use half::bf16;
use rand::Rng;

/// The BF16 bits of `t`, flattened.
pub fn bits(t: &Tensor) -> Vec<u16> {
    let v: Vec<bf16> = t.flatten_all().unwrap().to_vec1().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

/// Checks `y` (`[batch, rows]`) against an f64 product of the BF16 weight and input: each value
/// within 1% of the sum of |x·w| (the f32 accumulation and the BF16 rounding of the result are far
/// inside that; a wrong weight, column or row is far outside it).
pub fn check_against_reference(
    y: &Tensor,
    x: &[bf16],
    w: &[bf16],
    rows: usize,
    cols: usize,
    what: &str,
) {
    let y: Vec<bf16> = y.flatten_all().unwrap().to_vec1().unwrap();
    let batch = x.len() / cols;
    assert_eq!(y.len(), batch * rows, "{what}: output size");
    for b in 0..batch {
        for r in 0..rows {
            let (mut dot, mut mag) = (0f64, 0f64);
            for c in 0..cols {
                let p = x[b * cols + c].to_f64() * w[r * cols + c].to_f64();
                dot += p;
                mag += p.abs();
            }
            let got = y[b * rows + r].to_f64();
            if !dot.is_finite() || !got.is_finite() {
                assert_eq!(
                    dot.is_finite(),
                    got.is_finite(),
                    "{what}: [{b}, {r}] finiteness"
                );
                continue;
            }
            assert!(
                (got - dot).abs() <= 0.01 * mag + 1e-30,
                "{what}: [{b}, {r}] = {got}, reference {dot} (sum |x w| {mag})"
            );
        }
    }
}

/// `[batch, cols]` uniform(-1, 1) BF16 values, on the host and as a tensor on `device`.
pub fn random_x(
    rng: &mut impl Rng,
    batch: usize,
    cols: usize,
    device: &Device,
) -> (Vec<bf16>, Tensor) {
    let x: Vec<bf16> = (0..batch * cols)
        .map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0)))
        .collect();
    let t = Tensor::from_vec(x.clone(), (batch, cols), device).unwrap();
    (x, t)
}

/// A unit of members with the given shapes, N(0, 0.02) weights, loaded with `options`.
pub fn unit_of(
    shapes: &[(usize, usize)],
    seed: u64,
    device: &Device,
    options: Df11Options,
) -> (Vec<bf16>, Arc<Df11Group>) {
    unit_of_shaped(shapes, seed, device, options, false)
}

/// [`unit_of`], the group told its members' shapes when `tiled` (on CUDA, packed: members whose
/// shapes allow it are stored in the tensor-core tile order, as `options.tiles` says).
pub fn unit_of_shaped(
    shapes: &[(usize, usize)],
    seed: u64,
    device: &Device,
    options: Df11Options,
    tiled: bool,
) -> (Vec<bf16>, Arc<Df11Group>) {
    let n: usize = shapes.iter().map(|(r, c)| r * c).sum();
    let w = synth::normal_bf16(n, 0.02, seed);
    let mut members = Vec::new();
    let mut at = 0;
    for (r, c) in shapes {
        members.push(bytemuck::cast_slice::<bf16, u8>(&w[at..at + r * c]));
        at += r * c;
    }
    let enc = encode_unit(&members).unwrap();
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    let names = (0..shapes.len()).map(|i| format!("m{i}.weight")).collect();
    let given: Vec<Option<(usize, usize)>> = if tiled {
        shapes.iter().copied().map(Some).collect()
    } else {
        Vec::new()
    };
    let placement = df11_candle::UnitPlacement {
        options,
        offloaded: false,
        shapes: given,
    };
    let g = Df11Group::new("synthetic", names, &t, layout, device, &placement).unwrap();
    (w, g)
}
