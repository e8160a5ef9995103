//! One safetensors file as a DF11 folder holds it: the header/index reader
//! (`SafetensorsIndex`), then `Df11Model::open` on a folder of that file and a fixed
//! `config.json` (Qwen3's `pattern_dict`, with `[0-9]` for `\d`: the regexes are compiled for
//! every input, and Unicode classes would make that most of the time), then the CPU decode of
//! every unit it accepts. Nothing may panic; every tensor the index hands out must hold exactly
//! its shape's bytes; a unit the parallel decoder accepts must decode the same sequentially.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use df11_candle::{Df11Model, SafetensorsIndex};
use libfuzzer_sys::fuzz_target;

/// This process's folder: a fixed config.json, and the input written as model.safetensors.
fn folder() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::var_os("DF11_FUZZ_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let shm = PathBuf::from("/dev/shm");
                if shm.is_dir() {
                    shm
                } else {
                    std::env::temp_dir()
                }
            });
        let dir = base.join(format!("df11-fuzz-index-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        std::fs::write(dir.join("config.json"), CONFIG).expect("config.json");
        dir
    })
}

const CONFIG: &str = r#"{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
 "dfloat11_config": {"version": "0.5.0", "threads_per_block": [512], "bytes_per_thread": 8,
  "pattern_dict": {"lm_head|model\\.embed_tokens": [],
   "model\\.layers\\.[0-9]+": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]}}}"#;

fuzz_target!(|data: &[u8]| {
    let dir = folder();
    let path = dir.join("model.safetensors");
    std::fs::write(&path, data).expect("writing the input");

    if let Ok(index) = SafetensorsIndex::open_files(std::slice::from_ref(&path)) {
        for name in index.names() {
            let entry = index.entry(name).expect("a listed tensor has an entry");
            let t = index.get(name).expect("a listed tensor can be read");
            let elems = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let bits = elems.and_then(|e| e.checked_mul(t.dtype.bitsize()));
            let bytes = bits.map(|b| b.div_ceil(8));
            assert_eq!(bytes, Some(t.data.len()), "`{name}`: bytes for its shape");
            assert_eq!(entry.range.len(), t.data.len());
            index
                .require(name, t.dtype, Some(t.shape.len()))
                .expect("a tensor as it is");
            assert_eq!(index.path_of(name), path);
        }
    }

    match Df11Model::open(dir) {
        Ok(model) => {
            for unit in model.units() {
                let _ = model.unit_bytes(unit);
                let _ = unit.bits_per_weight(1);
                let par = model.decode_unit(unit);
                let mut seq = vec![half::bf16::ZERO; unit.layout.n_elements];
                let s = model.decode_unit_sequential_into(unit, &mut seq);
                match par {
                    Ok(p) => {
                        assert!(
                            s.is_ok(),
                            "sequential refused what parallel accepted: {s:?}"
                        );
                        assert_eq!(p, seq);
                    }
                    Err(e) => {
                        let _ = e.to_string();
                    }
                }
            }
            for name in model.plain_tensors() {
                assert!(model.plain_tensor(name).is_some());
            }
            let _ = model.compressed_weights().count();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
