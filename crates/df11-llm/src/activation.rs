//! The gated MLP's activation, `act(gate) * up`: SiLU (one fused launch for BF16 on CUDA,
//! `crate::ops::silu_mul_bf16`, candle's ops elsewhere) or GELU-tanh computed in f32.

use candle_core::{DType, Tensor};

use crate::error::Result;
use crate::spec::Activation;

/// `act(gate) * up`; `pdl`: the CUDA launch may be a programmatic dependent launch
/// ([`df11_candle::Df11Options::pdl`]).
pub fn gated(act: Activation, gate: &Tensor, up: &Tensor, pdl: bool) -> Result<Tensor> {
    match act {
        Activation::Silu => silu_mul(gate, up, pdl),
        Activation::GeluTanh => gelu_tanh_mul(gate, up),
    }
}

/// `gelu_tanh(gate) * up`, the GELU computed in f32 (as PyTorch does for any input dtype) and
/// rounded once to the compute dtype before the product.
pub fn gelu_tanh_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let dtype = gate.dtype();
    let act = gate.to_dtype(DType::F32)?.gelu()?.to_dtype(dtype)?;
    Ok((act * up)?)
}

/// `silu(gate) * up`, each result rounded to the dtype as candle's two ops do (`pdl`: as for
/// [`gated`]).
pub fn silu_mul(gate: &Tensor, up: &Tensor, pdl: bool) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if gate.device().is_cuda() && gate.dtype() == DType::BF16 && up.dtype() == gate.dtype() {
        return Ok(crate::ops::silu_mul_bf16(gate, up, pdl)?);
    }
    #[cfg(not(feature = "cuda"))]
    let _ = pdl;
    Ok((candle_nn::ops::silu(gate)? * up)?)
}

#[cfg(test)]
mod tests {
    /// The one-launch CUDA path against the formula computed on the host, within one BF16 step
    /// (`exp` may differ in its last bits).
    #[cfg(feature = "cuda")]
    #[test]
    fn fused_cuda_silu_mul_matches_the_formula() {
        use candle_core::{DType, Device, Tensor};
        use half::bf16;
        let dev = Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened");
        let g = Tensor::randn(0f32, 3.0, (3, 1000), &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let u = Tensor::randn(0f32, 1.0, (3, 1000), &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let got: Vec<bf16> = super::silu_mul(
            &g.to_device(&dev).unwrap(),
            &u.to_device(&dev).unwrap(),
            true,
        )
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
        let gs: Vec<bf16> = g.flatten_all().unwrap().to_vec1().unwrap();
        let us: Vec<bf16> = u.flatten_all().unwrap().to_vec1().unwrap();
        for i in 0..gs.len() {
            let x = gs[i].to_f64();
            let act = bf16::from_f64(x / (1.0 + (-x).exp()));
            let want = bf16::from_f32(act.to_f32() * us[i].to_f32());
            let steps = (got[i].to_bits() as i32 - want.to_bits() as i32).abs();
            assert!(steps <= 1, "{i}: {} vs {want}", got[i]);
        }
    }
}
