//! Writes DF11 units as raw files for the standalone CUDA kernel harness
//! (`kernels/harness/`): `luts.bin`, `encoded_exponent.bin`, `sign_mantissa.bin`, `gaps.bin`,
//! `output_positions.bin` (little-endian u32, as stored), `expected.bin` (BF16 bits).
//!
//! ```text
//! export_units model <df11-dir> <out-dir>        every unit of a DF11 folder (expected = CPU decode)
//! export_units qwen3-8b-layer <out-dir> [seed]   the 192,937,984-weight N(0, 0.02) layer unit
//! export_units stress <out-dir> [seed]           32-bit codes / 4-level LUTs, dense blocks, tiny units
//! ```
//!
//! For example (the harness is built by `kernels/harness/build.sh`; `--cpu` needs no GPU):
//!
//! ```text
//! cargo run --release --example export_units -- \
//!     model tests/fixtures/models/qwen3-tiny/df11 /tmp/units
//! cargo run --release --example export_units -- stress /tmp/units
//! bash kernels/harness/build.sh /tmp/df11_harness && /tmp/df11_harness --cpu /tmp/units/*
//! ```
//!
//! A fixture unit's directory is named `<model>__<unit with '.' as '_'>`, as
//! `kernels/harness/export_fixture.py` names it (that script writes the same files from the
//! safetensors directly, with `expected.bin` taken from the BF16 original).

use std::path::Path;

use df11_candle::{encode_unit, synth, Df11Model, EncodedUnit, UnitLayout};
use half::bf16;

fn write(dir: &Path, files: &[(&str, &[u8])]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, data) in files {
        std::fs::write(dir.join(name), data)?;
    }
    Ok(())
}

fn write_unit(
    dir: &Path,
    enc: &EncodedUnit,
    expected: &[bf16],
) -> Result<(), Box<dyn std::error::Error>> {
    let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| d.to_string())?;
    write(
        dir,
        &[
            ("luts.bin", &enc.luts),
            ("encoded_exponent.bin", &enc.encoded_exponent),
            ("sign_mantissa.bin", &enc.sign_mantissa),
            ("gaps.bin", &enc.gaps),
            ("output_positions.bin", &enc.output_positions),
            ("expected.bin", bytemuck::cast_slice(expected)),
        ],
    )?;
    println!(
        "{}: n={} bytes={} blocks={} K={} maxlen={} max_block_elems={}",
        dir.display(),
        layout.n_elements,
        layout.n_bytes,
        layout.n_blocks,
        layout.lut_rows,
        layout.max_code_length,
        layout.max_block_elements
    );
    Ok(())
}

fn encode(weights: &[&[bf16]]) -> Result<EncodedUnit, Box<dyn std::error::Error>> {
    let members: Vec<&[u8]> = weights.iter().map(|w| bytemuck::cast_slice(w)).collect();
    encode_unit(&members).map_err(|e| e.reason.into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seed = |i: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(42u64);
    match args.first().map(String::as_str) {
        Some("model") if args.len() == 3 => {
            let model = Df11Model::open(&args[1])?;
            let tag = Path::new(&args[1])
                .parent()
                .and_then(|p| p.file_name())
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            for unit in model.units() {
                let t = model.unit_tensors(unit)?;
                let expected = model.decode_unit(unit)?;
                // Named as kernels/harness/export_fixture.py names them.
                let dir =
                    Path::new(&args[2]).join(format!("{tag}__{}", unit.name.replace('.', "_")));
                write(
                    &dir,
                    &[
                        ("luts.bin", t.luts),
                        ("encoded_exponent.bin", t.encoded_exponent),
                        ("sign_mantissa.bin", t.sign_mantissa),
                        ("gaps.bin", t.gaps),
                        ("output_positions.bin", t.output_positions),
                        ("expected.bin", bytemuck::cast_slice(&expected)),
                    ],
                )?;
                println!("{}: n={}", dir.display(), unit.layout.n_elements);
            }
        }
        Some("qwen3-8b-layer") if args.len() >= 2 => {
            let n: usize = synth::QWEN3_8B_LAYER.iter().map(|(o, i)| o * i).sum();
            let w = synth::normal_bf16(n, 0.02, seed(2));
            let mut members = Vec::new();
            let mut at = 0;
            for (o, i) in synth::QWEN3_8B_LAYER {
                members.push(&w[at..at + o * i]);
                at += o * i;
            }
            let t = std::time::Instant::now();
            let enc = encode(&members)?;
            eprintln!("encoded {n} weights in {:.2} s", t.elapsed().as_secs_f64());
            write_unit(
                Path::new(&args[1]).join("qwen3_8b_layer").as_path(),
                &enc,
                &w,
            )?;
        }
        Some("stress") if args.len() >= 2 => {
            let out = Path::new(&args[1]);
            let s = seed(2);
            let fib = synth::fibonacci_exponents(34, s);
            write_unit(&out.join("stress_fib32"), &encode(&[&fib])?, &fib)?;
            let dense = synth::one_exponent_mostly(200_000, s);
            write_unit(&out.join("stress_dense"), &encode(&[&dense])?, &dense)?;
            let one = vec![bf16::from_f32(0.5); 70_001];
            write_unit(&out.join("stress_single_exponent"), &encode(&[&one])?, &one)?;
            let tiny = synth::normal_bf16(1, 0.02, s);
            write_unit(&out.join("stress_one_element"), &encode(&[&tiny])?, &tiny)?;
            let odd = synth::normal_bf16(123_457, 0.02, s);
            write_unit(
                &out.join("stress_odd_size"),
                &encode(&[&odd[..1000], &odd[1000..]])?,
                &odd,
            )?;
        }
        _ => {
            eprintln!("usage: export_units model <df11-dir> <out> | qwen3-8b-layer <out> [seed] | stress <out> [seed]");
            std::process::exit(2);
        }
    }
    Ok(())
}
