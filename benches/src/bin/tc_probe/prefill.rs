//! `tc_probe prefill M SLICE...`: a Qwen3-8B layer's products at M rows the way a prompt runs them,
//! whole and by slices of weight rows (the module doc of `main.rs`).

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{Df11Options, MatmulPath};

use super::{tiled_linears, time, using, LAYER_AS_LAUNCHED};

/// `tc_probe prefill M SLICE...` (module doc).
pub(crate) fn prefill_mode(dev: &Device, m: usize, slices: &[usize]) -> anyhow::Result<()> {
    let (df11, dense, _) = tiled_linears(dev, &LAYER_AS_LAUNCHED)?;
    let decode = Df11Options {
        matmul: MatmulPath::Decode,
        ..df11_benches::options()
    };
    let df11 = using(&df11, decode);
    let weights = dense
        .iter()
        .map(|l| Ok(l.weight()?))
        .collect::<anyhow::Result<Vec<Tensor>>>()?;
    let xs: Vec<Tensor> = LAYER_AS_LAUNCHED
        .iter()
        .map(|&(_, c)| Tensor::randn(0f32, 1.0, (m, c), dev)?.to_dtype(DType::BF16))
        .collect::<candle_core::Result<_>>()?;
    let product = |w: &Tensor, x: &Tensor| candle_nn::Linear::new(w.clone(), None).forward(x);
    // One matrix's product by slices of `slice` weight rows; `weight(r0, r1)` gives rows r0..r1.
    let sliced = |i: usize,
                  slice: usize,
                  weight: &dyn Fn(usize, usize) -> candle_core::Result<Tensor>|
     -> candle_core::Result<Tensor> {
        let rows = LAYER_AS_LAUNCHED[i].0;
        let parts = (0..rows)
            .step_by(slice)
            .map(|r0| product(&weight(r0, (r0 + slice).min(rows))?, &xs[i]))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&parts, 1)
    };
    let dense_rows = |i: usize| {
        let w = weights[i].clone();
        move |r0: usize, r1: usize| w.narrow(0, r0, r1 - r0)
    };
    let df11_rows = |i: usize| {
        let g = df11[i].group().expect("compressed").clone();
        let cols = LAYER_AS_LAUNCHED[i].1;
        move |r0: usize, r1: usize| {
            g.decode_elements(r0 * cols..r1 * cols)
                .map_err(candle_core::Error::wrap)?
                .reshape((r1 - r0, cols))
        }
    };
    let whole_bf16 = time(dev, 10, || {
        for (w, x) in weights.iter().zip(&xs) {
            product(w, x).unwrap();
        }
    });
    let whole_df11 = time(dev, 10, || {
        for (l, x) in df11.iter().zip(&xs) {
            l.forward(x).unwrap();
        }
    });
    println!("prefill of {m} rows, Qwen3-8B layer as launched, ms: BF16 whole {:.4} | DF11 whole (decode + cuBLAS) {:.4} | DF11 / BF16 {:.2}", whole_bf16 * 1e3, whole_df11 * 1e3, whole_bf16 / whole_df11);
    println!("slice rows | BF16 sliced ms | DF11 sliced ms | DF11 sliced / BF16 whole | DF11 sliced / BF16 sliced");
    for &slice in slices {
        for i in 0..LAYER_AS_LAUNCHED.len() {
            let a = sliced(i, slice, &df11_rows(i))?
                .flatten_all()?
                .to_vec1::<half::bf16>()?;
            let b = sliced(i, slice, &dense_rows(i))?
                .flatten_all()?
                .to_vec1::<half::bf16>()?;
            anyhow::ensure!(a == b, "matrix {i}: DF11 sliced differs from BF16 sliced");
        }
        let bf16 = time(dev, 10, || {
            for i in 0..LAYER_AS_LAUNCHED.len() {
                sliced(i, slice, &dense_rows(i)).unwrap();
            }
        });
        let ours = time(dev, 10, || {
            for i in 0..LAYER_AS_LAUNCHED.len() {
                sliced(i, slice, &df11_rows(i)).unwrap();
            }
        });
        println!(
            "{slice:>10} | {:.4} | {:.4} | {:.2} | {:.2}",
            bf16 * 1e3,
            ours * 1e3,
            whole_bf16 / ours,
            bf16 / ours
        );
    }
    Ok(())
}
