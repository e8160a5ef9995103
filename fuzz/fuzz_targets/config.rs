//! `config.json` as a DF11 folder holds it: `dfloat11_config` (versions, `threads_per_block`,
//! `bytes_per_thread`, `pattern_dict` and its regexes) through `read_df11_config` (the file, the
//! legacy and non-DF11 checks) and `Df11Config`. Nothing may panic. A parsed `dfloat11_config`
//! must read back from its own JSON form, and a `pattern_dict` key that is not a valid regex on
//! its own must be refused (the official loader calls Python's `re.fullmatch` on it).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use df11_candle::config::read_df11_config;
use df11_candle::Df11Config;
use libfuzzer_sys::fuzz_target;

fn folder() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::var_os("DF11_FUZZ_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("df11-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        dir
    })
}

const NAMES: [&str; 6] = [
    "model.layers.0",
    "model.layers.35",
    "lm_head",
    "model.embed_tokens",
    "language_model.model.layers.1",
    "",
];

fuzz_target!(|data: &[u8]| {
    let dir = folder();
    std::fs::write(dir.join("config.json"), data).expect("config.json");

    match read_df11_config(dir) {
        Ok((_, cfg)) => check_df11_config(&cfg, dir),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});

fn check_df11_config(cfg: &Df11Config, dir: &Path) {
    let _ = cfg.version_is_known();
    assert_eq!(cfg.threads_per_block, [512]);
    assert_eq!(cfg.bytes_per_thread, 8);
    let back = Df11Config::from_json(&cfg.to_json(), &dir.join("config.json"))
        .expect("a parsed dfloat11_config reads back from its JSON form");
    assert_eq!(back.version, cfg.version);
    let keys = |c: &Df11Config| -> Vec<(String, Vec<String>)> {
        c.pattern_dict
            .patterns()
            .iter()
            .map(|p| (p.key.clone(), p.members.clone()))
            .collect()
    };
    assert_eq!(keys(&back), keys(cfg));
    for p in cfg.pattern_dict.patterns() {
        assert!(
            regex_ok(&p.key),
            "pattern `{}` is accepted but is not a regex on its own",
            p.key
        );
    }
    for name in NAMES {
        for p in cfg.pattern_dict.matching(name) {
            assert!(p.is_match(name));
            assert_eq!(
                p.member_weights(name).len(),
                p.members.len().max(1),
                "one weight per member"
            );
        }
    }
}

/// Whether `key` compiles as a regex by itself (the `regex` crate df11-candle uses).
fn regex_ok(key: &str) -> bool {
    regex::Regex::new(key).is_ok()
}
