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
    Ok(())
}
