//! `compress_model(bf16/)` reproduces the official compressor's output for every fixture: the
//! same tensor names, dtypes, shapes and bytes, and `config.json` equal as JSON.

mod common;

use df11_candle::{compress_model, CompressOptions, SafetensorsIndex};

#[test]
fn compressor_reproduces_every_official_fixture_byte_for_byte() {
    for name in common::MODELS {
        let out = common::temp_dir();
        let report = compress_model(
            &common::model_dir(name, "bf16"),
            out.path(),
            &CompressOptions::default(),
            |_| {},
        )
        .unwrap();
        assert!(report.units >= 2, "{name}");

        let official = SafetensorsIndex::open_dir(&common::model_dir(name, "df11")).unwrap();
        let ours = SafetensorsIndex::open_dir(out.path()).unwrap();
        let a: Vec<&str> = official.names().collect();
        let b: Vec<&str> = ours.names().collect();
        assert_eq!(a, b, "{name}: tensor names differ");
        for n in a {
            let (x, y) = (official.get(n).unwrap(), ours.get(n).unwrap());
            assert_eq!(x.dtype, y.dtype, "{name}: {n}");
            assert_eq!(x.shape, y.shape, "{name}: {n}");
            assert!(x.data == y.data, "{name}: bytes of {n} differ");
        }
        // Each tensor sits in the file the official layout puts it in.
        for n in ours.names() {
            let f = |i: &SafetensorsIndex| i.path_of(n).file_name().unwrap().to_owned();
            assert_eq!(f(&official), f(&ours), "{name}: {n} is in another file");
        }

        let read = |p: std::path::PathBuf| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        assert_eq!(
            read(common::model_dir(name, "df11").join("config.json")),
            read(out.path().join("config.json")),
            "{name}: config.json"
        );
        for f in [
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
        ] {
            assert!(out.path().join(f).is_file(), "{name}: {f} not copied");
        }
    }
}

/// A diffusers FLUX transformer (the FLUX fixture's dev- and schnell-shaped ones): the built-in
/// FLUX pattern, and every file of the output byte-identical to the official compressor's
/// (the blocks' files, `diffusion_pytorch_model.safetensors`, `config.json` with the DF11 block
/// alone).
#[test]
fn compressor_reproduces_the_official_flux_transformers_file_for_file() {
    let flux = common::fixtures().join("models/flux-tiny");
    for (base, official) in [("base", "df11"), ("base-schnell", "df11-schnell")] {
        let out = common::temp_dir();
        let src = flux.join(base).join("transformer");
        let report = compress_model(&src, out.path(), &CompressOptions::default(), |_| {}).unwrap();
        assert_eq!(report.units, 4, "{base}");
        let names = |dir: &std::path::Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let official = flux.join(official);
        assert_eq!(names(out.path()), names(&official), "{base}: files");
        for f in names(&official) {
            let (a, b) = (
                std::fs::read(official.join(&f)).unwrap(),
                std::fs::read(out.path().join(&f)).unwrap(),
            );
            assert!(a == b, "{base}: {f} differs from the official compressor's");
        }
    }
}
