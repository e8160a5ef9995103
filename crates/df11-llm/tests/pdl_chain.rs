//! Programmatic dependent launches through a decode step's chain of kernels: the models' step
//! kernels (`df11_llm::ops`) around DF11 products and their twins (df11-candle's streaming
//! kernels), with PDL on and off. Runs in the GPU suite (`--features cuda`); without CUDA this
//! file has no tests.
#![cfg(feature = "cuda")]

// The product tests' helpers (synthetic units, random inputs, the f64 reference).
#[allow(dead_code)]
#[path = "../../df11-candle/tests/common/products.rs"]
mod products;

use candle_core::{DType, Module, Tensor};
use df11_candle::{Df11Linear, Df11Options, ExponentForm, Linear, MatmulPath, TileMembers};
use df11_llm::ops::{rms_norm_bf16, silu_mul_bf16};
use half::bf16;
use products::{bits, check_against_reference, random_x};
use rand::{Rng, SeedableRng};

/// Programmatic dependent launches (`DF11_PDL`, sm_90 and newer: a kernel's CTAs start while the
/// kernel before it runs, once that one has triggered; a DF11 product may read its weights first,
/// then waits for the kernel before): a chain norm -> products -> activation gives the same bits
/// with and without, the DF11 product the same as its twins (over the decoded weight and as a
/// dense layer: ordinary launches after PDL ones), and the reference's values. The norm writes
/// the products' x just before them and the activation reads two products' outputs, so a kernel
/// that read its input before the kernel before had finished would show here.
#[test]
fn programmatic_dependent_launches_give_the_same_bits() {
    let options = Df11Options {
        matmul: MatmulPath::Fused,
        exponents: ExponentForm::Packed,
        tiles: TileMembers::Chunked,
        ..Df11Options::default()
    };
    // A device of df11-llm's: its own stream, cudarc's event tracking off (the PDL launch needs
    // it off).
    let device = df11_llm::open_cuda(0).expect("the cuda feature is on but no CUDA device opened");
    let seed = std::env::var("DF11_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("seed {seed} (replay with DF11_TEST_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let cols = 4096;
    let shapes = [(1024, cols), (2048, cols)];
    let (w, g) = products::unit_of_shaped(&shapes, rng.gen(), &device, options, true);
    let first = Df11Linear::new(g.clone(), 0, 1024, cols, None, DType::BF16).unwrap();
    let second = Df11Linear::new(g.clone(), 1, 2048, cols, None, DType::BF16).unwrap();
    let first_twin = first.clone().decoded().unwrap();
    // A dense layer over the same weight (a BF16 model's layer).
    let dense = Linear::dense(first_twin.weight().unwrap().copy().unwrap(), None, options);
    device.synchronize().unwrap();
    let norm_w: Vec<bf16> = (0..cols)
        .map(|_| bf16::from_f32(rng.gen_range(0.5f32..1.5)))
        .collect();
    let norm_w = Tensor::from_vec(norm_w, cols, &device).unwrap();
    for batch in [1, 4, 8, 16, 32] {
        let (_, x) = random_x(&mut rng, batch * 4, cols / 4, &device);
        let x = x.reshape((batch, cols)).unwrap();
        let mut outs = Vec::new();
        for pdl in [true, false, true] {
            let o = Df11Options { pdl, ..options };
            let first = first.clone().with_options(o);
            let first_twin = first_twin.clone().with_options(o);
            let dense = dense.clone().with_options(o);
            let second = second.clone().with_options(o);
            for _ in 0..3 {
                let xn = rms_norm_bf16(&x, &norm_w, 1e-6, pdl).unwrap();
                let y = first.forward(&xn).unwrap();
                let y_twin = first_twin.forward(&xn).unwrap();
                let y_dense = dense.forward(&xn).unwrap();
                // A product after a product, then a small kernel after it reading two products'
                // outputs.
                let z = second.forward(&xn).unwrap();
                let a = silu_mul_bf16(&y_dense, &y, pdl).unwrap();
                outs.push((
                    bits(&y),
                    bits(&y_twin),
                    bits(&y_dense),
                    bits(&z),
                    bits(&a),
                    xn,
                ));
            }
        }
        let what = format!("batch {batch}");
        let (y0, _, _, z0, a0, xn0) = &outs[0];
        for (k, (y, y_twin, y_dense, z, a, xn)) in outs.iter().enumerate() {
            assert!(bits(xn) == bits(xn0), "{what}: run {k}: the norm differs");
            assert!(
                y == y0,
                "{what}: run {k}: DF11 differs from the first run (PDL on)"
            );
            assert!(y_twin == y0, "{what}: run {k}: the twin differs from DF11");
            assert!(
                y_dense == y0,
                "{what}: run {k}: the dense twin differs from DF11"
            );
            assert!(z == z0, "{what}: run {k}: the second product differs");
            assert!(a == a0, "{what}: run {k}: the activation differs");
        }
        let xh: Vec<bf16> = xn0.flatten_all().unwrap().to_vec1().unwrap();
        let y = first.forward(xn0).unwrap();
        check_against_reference(&y, &xh, &w[..1024 * cols], 1024, cols, &what);
        let z = second.forward(xn0).unwrap();
        check_against_reference(&z, &xh, &w[1024 * cols..], 2048, cols, &what);
    }
    g.check_status().unwrap();
}
