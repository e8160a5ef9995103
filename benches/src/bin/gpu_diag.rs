//! Diagnostic: block-range decodes of a large unit (an embedding-sized table) on the GPU compared
//! with the whole-unit decode, row by row, with the status word checked after each.

use candle_core::Device;
use df11_candle::{encode_unit, synth, Df11Group, UnitLayout};

fn main() -> anyhow::Result<()> {
    let dev = Device::new_cuda(0)?;
    let (rows, hidden) = (151_936usize, 4096usize);
    let w = synth::normal_bf16(rows * hidden, 0.02, 3);
    let enc = encode_unit(&[bytemuck::cast_slice(&w)]).map_err(|e| anyhow::anyhow!(e.reason))?;
    let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| anyhow::anyhow!("{d}"))?;
    println!(
        "unit: blocks {} max_block {}",
        layout.n_blocks, layout.max_block_elements
    );
    let g = Df11Group::new(
        "emb",
        vec!["emb.weight".into()],
        &enc.tensors(),
        layout,
        &dev,
    )?;
    let full: Vec<half::bf16> = g.decode()?.to_vec1()?;
    println!("full decode exact: {}", full == w);
    g.check_status()?;
    let mut bad = 0;
    let mut s = 12345u64;
    for i in 0..300 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let id = (s % rows as u64) as usize;
        let r: Vec<half::bf16> = g
            .decode_elements(id * hidden..(id + 1) * hidden)?
            .to_vec1()?;
        let ok = r[..] == w[id * hidden..(id + 1) * hidden];
        let st = g.check_status();
        if !ok || st.is_err() {
            bad += 1;
            let first = r.iter().zip(&w[id * hidden..]).position(|(a, b)| a != b);
            println!("row {id} (try {i}): exact {ok} first diff {first:?} status {st:?}");
        }
    }
    println!("bad rows: {bad} / 300");
    // Repeated whole-unit decodes (as an lm_head is decoded at every token), and a matmul with
    // the decoded weight each time, as Df11Linear does.
    let x = candle_core::Tensor::randn(0f32, 1.0, (1, hidden), &dev)?
        .to_dtype(candle_core::DType::BF16)?;
    let reference = {
        let wt = candle_core::Tensor::from_slice(&w, (rows, hidden), &dev)?;
        x.matmul(&wt.t()?)?.flatten_all()?.to_vec1::<half::bf16>()?
    };
    let lin =
        df11_candle::Df11Linear::new(g.clone(), 0, rows, hidden, None, candle_core::DType::BF16)?;
    let mut bad_full = 0;
    let mut bad_mm = 0;
    for i in 0..40 {
        let d: Vec<half::bf16> = g.decode()?.to_vec1()?;
        if d != w {
            bad_full += 1;
            let first = d.iter().zip(&w).position(|(a, b)| a != b);
            println!(
                "full decode {i}: first diff {first:?} status {:?}",
                g.check_status()
            );
        }
        use candle_core::Module;
        let y: Vec<half::bf16> = lin.forward(&x)?.flatten_all()?.to_vec1()?;
        let nan = y.iter().filter(|v| v.is_nan()).count();
        if y != reference {
            bad_mm += 1;
            println!("matmul {i}: differs, {nan} NaN");
        }
    }
    println!(
        "bad full decodes: {bad_full} / 40, bad matmuls: {bad_mm} / 40, status {:?}",
        g.check_status()
    );
    Ok(())
}
