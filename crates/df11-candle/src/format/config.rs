//! `config.json` and its `dfloat11_config` block.

use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::{Df11Error, Result};

/// `dfloat11_config.version` strings written by the releases we know. The format has not changed
/// from 0.2.0 to 0.5.0; another 0.2.x-0.5.x string opens with a warning
/// ([`supported_version`]), anything else is refused.
pub const KNOWN_VERSIONS: [&str; 4] = ["0.2.0", "0.3.1", "0.3.2", "0.5.0"];

/// The versions we read, as the refusal of another one says them.
pub const SUPPORTED_VERSIONS: &str = "0.2.x to 0.5.x (seen: 0.2.0, 0.3.1, 0.3.2, 0.5.0)";

/// Whether `version` names a release of the format we read: `0.M.P` with `M` from 2 to 5
/// (0.1.0 is the legacy pickle format; a later minor or major release may change the format).
pub fn supported_version(version: &str) -> bool {
    let mut parts = version.split('.');
    let number = |p: Option<&str>| {
        p.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u32>().ok())
    };
    let (major, minor, patch) = (
        number(parts.next()),
        number(parts.next()),
        number(parts.next()),
    );
    parts.next().is_none()
        && major == Some(0)
        && minor.is_some_and(|m| (2..=5).contains(&m))
        && patch.is_some()
}

/// The version string our compressor writes (the official compressor whose output it reproduces).
pub const WRITER_VERSION: &str = "0.5.0";

/// Threads per CUDA block the format is laid out for (every published file uses 512).
pub const THREADS_PER_BLOCK: usize = 512;
/// Bytes of bitstream per thread window.
pub const BYTES_PER_THREAD: usize = 8;
/// Bytes of bitstream per block.
pub const BYTES_PER_BLOCK: usize = THREADS_PER_BLOCK * BYTES_PER_THREAD;

/// One `pattern_dict` entry: a regex over module paths and the member sub-modules of a unit.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The key as written in the config (e.g. `model.layers.\d+`).
    pub key: String,
    /// Member sub-module paths, in concatenation order; empty when the matched module is itself
    /// the unit (an `nn.Linear` or `nn.Embedding`).
    pub members: Vec<String>,
    regex: Regex,
}

impl Pattern {
    /// Builds a pattern; the key is matched with Python `re.fullmatch` semantics.
    pub fn new(key: &str, members: Vec<String>) -> std::result::Result<Self, String> {
        // The key must be a regex on its own: `a)|(b` is not, but `^(?:a)|(b)$` is, and would
        // match every name starting with `a` (Python's `re.fullmatch` refuses such a key).
        regex_syntax::ast::parse::Parser::new()
            .parse(key)
            .map_err(|e| format!("pattern `{key}` is not a valid regex: {e}"))?;
        let regex = Regex::new(&format!("^(?:{key})$"))
            .map_err(|e| format!("pattern `{key}` is not a valid regex: {e}"))?;
        Ok(Self {
            key: key.to_string(),
            members,
            regex,
        })
    }

    /// Whether `module` (a dotted module path) full-matches this pattern.
    pub fn is_match(&self, module: &str) -> bool {
        self.regex.is_match(module)
    }

    /// The names of the weight tensors a unit called `unit` decodes into, in order.
    pub fn member_weights(&self, unit: &str) -> Vec<String> {
        if self.members.is_empty() {
            vec![format!("{unit}.weight")]
        } else {
            self.members
                .iter()
                .map(|m| format!("{unit}.{m}.weight"))
                .collect()
        }
    }
}

/// The ordered `pattern_dict` of a DF11 model.
#[derive(Debug, Clone, Default)]
pub struct PatternDict {
    patterns: Vec<Pattern>,
}

impl PatternDict {
    /// Builds a dict from `(key, members)` pairs, in order.
    pub fn new<K: AsRef<str>, M: AsRef<str>>(
        entries: &[(K, &[M])],
    ) -> std::result::Result<Self, String> {
        let patterns = entries
            .iter()
            .map(|(k, ms)| {
                Pattern::new(
                    k.as_ref(),
                    ms.iter().map(|m| m.as_ref().to_string()).collect(),
                )
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// Parses the JSON object form (`{"regex": ["member", ...], ...}`), keeping key order.
    pub fn from_json(value: &Value) -> std::result::Result<Self, String> {
        let obj = value
            .as_object()
            .ok_or("pattern_dict must be a JSON object")?;
        let mut patterns = Vec::with_capacity(obj.len());
        for (key, members) in obj {
            let list = members
                .as_array()
                .ok_or_else(|| format!("pattern_dict[`{key}`] must be a list"))?;
            let members = list
                .iter()
                .map(|m| {
                    m.as_str().map(str::to_string).ok_or_else(|| {
                        format!("pattern_dict[`{key}`] must hold only strings, found {m}")
                    })
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            patterns.push(Pattern::new(key, members)?);
        }
        if patterns.is_empty() {
            return Err("pattern_dict is empty".into());
        }
        Ok(Self { patterns })
    }

    /// The JSON object form, keys in order.
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        for p in &self.patterns {
            obj.insert(
                p.key.clone(),
                Value::Array(p.members.iter().cloned().map(Value::String).collect()),
            );
        }
        Value::Object(obj)
    }

    /// The patterns, in order.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// The patterns that full-match `module`.
    pub fn matching(&self, module: &str) -> Vec<&Pattern> {
        self.patterns
            .iter()
            .filter(|p| p.is_match(module))
            .collect()
    }
}

/// The `dfloat11_config` block of `config.json`.
#[derive(Debug, Clone)]
pub struct Df11Config {
    /// The writer's package version (informational).
    pub version: String,
    /// Always `[512]` in files we accept.
    pub threads_per_block: Vec<usize>,
    /// Always 8 in files we accept.
    pub bytes_per_thread: usize,
    /// Which modules are compressed, and in which member order.
    pub pattern_dict: PatternDict,
}

impl Df11Config {
    /// A config for files written by our compressor.
    pub fn for_writing(pattern_dict: PatternDict) -> Self {
        Self {
            version: WRITER_VERSION.to_string(),
            threads_per_block: vec![THREADS_PER_BLOCK],
            bytes_per_thread: BYTES_PER_THREAD,
            pattern_dict,
        }
    }

    /// Parses the block; `path` is only used in errors.
    pub fn from_json(value: &Value, path: &Path) -> Result<Self> {
        let bad = |reason: String| Df11Error::InvalidConfig {
            path: path.to_path_buf(),
            reason,
        };
        let obj = value
            .as_object()
            .ok_or_else(|| bad("dfloat11_config must be an object".into()))?;
        let version = match obj.get("version") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "dfloat11_config.version must be a string, found {other}"
                )))
            }
            None => {
                return Err(bad(format!(
                    "dfloat11_config.version is missing (supported: {SUPPORTED_VERSIONS})"
                )))
            }
        };
        if !supported_version(&version) {
            return Err(Df11Error::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
                supported: SUPPORTED_VERSIONS,
            });
        }
        let threads_per_block = match obj.get("threads_per_block") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_u64().map(|x| x as usize))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    bad("dfloat11_config.threads_per_block must be a list of integers".into())
                })?,
            Some(Value::Number(n)) => vec![n.as_u64().unwrap_or(0) as usize],
            _ => return Err(bad("dfloat11_config.threads_per_block is missing".into())),
        };
        if threads_per_block != [THREADS_PER_BLOCK] {
            return Err(bad(format!(
                "dfloat11_config.threads_per_block is {threads_per_block:?}; only [512] exists in the format"
            )));
        }
        let bytes_per_thread = obj
            .get("bytes_per_thread")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("dfloat11_config.bytes_per_thread is missing".into()))?
            as usize;
        if bytes_per_thread != BYTES_PER_THREAD {
            return Err(bad(format!(
                "dfloat11_config.bytes_per_thread is {bytes_per_thread}; only 8 exists in the format"
            )));
        }
        let pattern_dict = PatternDict::from_json(
            obj.get("pattern_dict")
                .ok_or_else(|| bad("dfloat11_config.pattern_dict is missing".into()))?,
        )
        .map_err(bad)?;
        Ok(Self {
            version,
            threads_per_block,
            bytes_per_thread,
            pattern_dict,
        })
    }

    /// The JSON form written into `config.json`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "version": self.version,
            "threads_per_block": self.threads_per_block,
            "bytes_per_thread": self.bytes_per_thread,
            "pattern_dict": self.pattern_dict.to_json(),
        })
    }

    /// Whether `version` is one of the releases we have seen.
    pub fn version_is_known(&self) -> bool {
        KNOWN_VERSIONS.contains(&self.version.as_str())
    }
}

/// Reads and parses `dir/config.json`.
pub fn read_config_json(dir: &Path) -> Result<(PathBuf, Value)> {
    let path = dir.join("config.json");
    if !dir.is_dir() {
        return Err(Df11Error::NotAModel {
            path: dir.to_path_buf(),
            reason: "not a directory".into(),
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Df11Error::NotAModel {
                path: dir.to_path_buf(),
                reason: "no config.json in this folder".into(),
            }
        } else {
            Df11Error::io(&path, e)
        }
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|source| Df11Error::Json {
        path: path.clone(),
        source,
    })?;
    Ok((path, value))
}

/// True when `dir` holds a legacy DFloat11 0.1.0 repo: a config of only `dfloat11_version`, or
/// pickled unit files.
pub fn is_legacy_pickle_repo(dir: &Path, config: Option<&Value>) -> bool {
    if let Some(obj) = config.and_then(Value::as_object) {
        if obj.contains_key("dfloat11_version") && !obj.contains_key("dfloat11_config") {
            return true;
        }
    }
    let has_pickles = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "pkl"))
        })
        .unwrap_or(false);
    has_pickles && config.is_none_or(|c| c.get("dfloat11_config").is_none())
}

/// Reads `dir/config.json` and its `dfloat11_config`, refusing legacy and non-DF11 folders.
pub fn read_df11_config(dir: &Path) -> Result<(Value, Df11Config)> {
    let (path, value) = match read_config_json(dir) {
        Ok(x) => x,
        Err(e) => {
            if is_legacy_pickle_repo(dir, None) {
                return Err(Df11Error::LegacyPickle {
                    path: dir.to_path_buf(),
                });
            }
            return Err(e);
        }
    };
    if is_legacy_pickle_repo(dir, Some(&value)) {
        return Err(Df11Error::LegacyPickle {
            path: dir.to_path_buf(),
        });
    }
    let block = value
        .get("dfloat11_config")
        .ok_or_else(|| Df11Error::NotDf11 { path: path.clone() })?;
    let cfg = Df11Config::from_json(block, &path)?;
    Ok((value, cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_and_unescaped_dots_fullmatch() {
        let a = Pattern::new(r"model.layers.\d+", vec![]).unwrap();
        let b = Pattern::new(r"model\.layers\.\d+", vec![]).unwrap();
        for p in [&a, &b] {
            assert!(p.is_match("model.layers.0"));
            assert!(p.is_match("model.layers.35"));
            assert!(!p.is_match("model.layers.0.self_attn"));
            assert!(!p.is_match("xmodel.layers.0"));
        }
        // Only the unescaped form accepts other characters where the dots are.
        assert!(a.is_match("model_layers_1"));
        assert!(!b.is_match("model_layers_1"));
    }

    /// Found writing the `config` fuzz target (which checks it): a key that only parses once
    /// wrapped in `^(?:...)$` escaped the anchors (`lm_head)|(x` matched every name starting
    /// with `lm_head`).
    #[test]
    fn keys_that_are_not_regexes_on_their_own_are_refused() {
        for key in ["lm_head)|(x", "a)|(?:b", "(?:a", "a)", ")("] {
            let e = Pattern::new(key, vec![]).unwrap_err();
            assert!(e.contains("not a valid regex"), "{key}: {e}");
        }
        let v: Value = serde_json::json!({"lm_head)|(model.layers.\\d+": []});
        assert!(PatternDict::from_json(&v).is_err());
    }

    #[test]
    fn alternation_is_anchored_as_a_whole() {
        let p = Pattern::new("lm_head|model.embed_tokens", vec![]).unwrap();
        assert!(p.is_match("lm_head"));
        assert!(p.is_match("model.embed_tokens"));
        assert!(!p.is_match("lm_head.x"));
    }

    #[test]
    fn pattern_dict_keeps_order() {
        let v: Value =
            serde_json::from_str(r#"{"z": [], "a": ["self_attn.o_proj", "self_attn.qkv_proj"]}"#)
                .unwrap();
        let d = PatternDict::from_json(&v).unwrap();
        assert_eq!(d.patterns()[0].key, "z");
        assert_eq!(
            d.patterns()[1].member_weights("a"),
            vec!["a.self_attn.o_proj.weight", "a.self_attn.qkv_proj.weight"]
        );
        assert_eq!(d.to_json(), v);
    }
}
