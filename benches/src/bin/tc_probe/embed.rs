//! `tc_probe embed VOCAB HIDDEN BATCH...`: a DF11 embedding's lookups as a decode step makes them,
//! against candle's dense embedding (the module doc of `main.rs`).

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::synth;

use super::time;

/// `tc_probe embed VOCAB HIDDEN BATCH...` (module doc).
pub(crate) fn embed_mode(
    dev: &Device,
    vocab: usize,
    hidden: usize,
    batches: &[usize],
) -> anyhow::Result<()> {
    let w = synth::normal_bf16(vocab * hidden, 0.02, 11);
    let g = df11_benches::one_member_group("embed", &w, dev)?;
    anyhow::ensure!(g.is_packed(), "not packed");
    let df11 = df11_candle::Df11Embedding::new(g, 0, vocab, hidden, DType::BF16)?;
    let dense = candle_nn::Embedding::new(df11.table()?, hidden);
    println!("embedding [{vocab}, {hidden}]: us a call (ids made from host tokens, synchronized), DF11 ids on the host / on the device, dense");
    let mut rng = 0x2545F4914F6CDD1Du64;
    for &batch in batches {
        let tokens: Vec<u32> = (0..batch)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % vocab as u64) as u32
            })
            .collect();
        let on = |d: &Device| Tensor::new(tokens.as_slice(), d).and_then(|t| t.unsqueeze(1));
        // The same rows every way.
        let want = dense
            .forward(&on(dev)?)?
            .flatten_all()?
            .to_vec1::<half::bf16>()?;
        for d in [&Device::Cpu, dev] {
            let got = df11
                .forward(&on(d)?)?
                .flatten_all()?
                .to_vec1::<half::bf16>()?;
            anyhow::ensure!(
                got == want,
                "DF11 rows differ from the table's at batch {batch}"
            );
        }
        let host = time(dev, 50, || {
            df11.forward(&on(&Device::Cpu).unwrap()).unwrap();
        });
        let device = time(dev, 50, || {
            df11.forward(&on(dev).unwrap()).unwrap();
        });
        let bf16 = time(dev, 50, || {
            dense.forward(&on(dev).unwrap()).unwrap();
        });
        println!(
            "{batch:>5} | {:.1} / {:.1} | {:.1}",
            host * 1e6,
            device * 1e6,
            bf16 * 1e6
        );
    }
    Ok(())
}
