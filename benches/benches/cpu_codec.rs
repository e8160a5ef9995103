//! CPU codec throughput on a Qwen3-8B-sized layer unit (192,937,984 N(0, 0.02) BF16 weights):
//! decode in GB/s of BF16 output (sequential; parallel on 1 thread and on all threads) and
//! encode (the compressor's core) in M weights/s.
//!
//! `cargo bench -p df11-benches --bench cpu_codec`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use df11_benches::{member_bytes, qwen3_8b_layer_unit};
use df11_candle::{decode_parallel, decode_sequential, encode_unit, DecodeTable, UnitLayout};
use half::bf16;

fn codec(c: &mut Criterion) {
    let (weights, enc) = qwen3_8b_layer_unit(7);
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    let table = DecodeTable::new(t.luts);
    let n = layout.n_elements;
    let mut out = vec![bf16::ZERO; n];

    // Exactness first: a benchmark of a wrong decoder is worthless.
    decode_parallel(&t, &layout, &table, &mut out).unwrap();
    assert!(out == weights, "parallel decode is not exact");

    let mut g = c.benchmark_group("qwen3_8b_layer");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(2 * n as u64));
    g.bench_function("decode_sequential_1_thread", |b| {
        b.iter(|| decode_sequential(&t, &layout, &table, &mut out).unwrap())
    });
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    g.bench_function("decode_parallel_1_thread", |b| {
        b.iter(|| one.install(|| decode_parallel(&t, &layout, &table, &mut out).unwrap()))
    });
    g.bench_function(
        format!("decode_parallel_{}_threads", rayon::current_num_threads()),
        |b| b.iter(|| decode_parallel(&t, &layout, &table, &mut out).unwrap()),
    );
    g.throughput(Throughput::Elements(n as u64));
    let members = member_bytes(&weights);
    g.bench_function(
        format!("encode_{}_threads", rayon::current_num_threads()),
        |b| b.iter(|| encode_unit(&members).unwrap()),
    );
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
