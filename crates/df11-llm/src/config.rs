//! A model folder's `config.json` and `generation_config.json`: the parts every architecture
//! reads the same way (architecture check, DF11 marker, RoPE parameters in either schema, EOS ids).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{LlmError, Result};

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| LlmError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| LlmError::json(path, e))
}

/// RoPE parameters, from the top level (`rope_theta`, `rope_scaling`) or from the newer
/// `rope_parameters` block.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    /// The base θ.
    pub theta: f64,
    /// `rope_type` when it is not the default (`"default"` or absent gives `None`).
    pub rope_type: Option<String>,
    /// The whole scaling block, for architectures that implement a scaling type.
    pub scaling: Option<Value>,
}

/// A model's `config.json`.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    path: PathBuf,
    json: Value,
}

impl ModelConfig {
    /// Reads `dir/config.json`.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        if !path.is_file() {
            return Err(LlmError::MissingFile {
                dir: dir.to_path_buf(),
                file: "config.json".into(),
            });
        }
        let json = read_json(&path)?;
        Ok(Self { path, json })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw JSON.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// Whether this is a DF11 model (has a `dfloat11_config` block).
    pub fn is_df11(&self) -> bool {
        self.json.get("dfloat11_config").is_some()
    }

    /// `architectures` (e.g. `["Qwen3ForCausalLM"]`) and `model_type`, for messages.
    pub fn describe(&self) -> String {
        let archs: Vec<&str> = self
            .json
            .get("architectures")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let model_type = self.json.get("model_type").and_then(Value::as_str);
        match (archs.is_empty(), model_type) {
            (false, _) => archs.join(", "),
            (true, Some(t)) => format!("model_type `{t}`"),
            (true, None) => "unknown-architecture".into(),
        }
    }

    /// Checks that `model_type` is one of `model_types`; `name` names the architecture run.
    pub fn check_model_type(&self, model_types: &[&str], name: &str) -> Result<()> {
        let t = self.json.get("model_type").and_then(Value::as_str);
        if t.is_some_and(|t| model_types.contains(&t)) {
            return Ok(());
        }
        Err(LlmError::WrongArchitecture {
            path: self.path.clone(),
            expected: name.to_string(),
            found: self.describe(),
        })
    }

    /// Deserializes the config into an architecture's typed config.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T> {
        T::deserialize(&self.json).map_err(|e| LlmError::config(&self.path, e.to_string()))
    }

    /// The RoPE parameters. `rope_theta` at the top level wins over `rope_parameters.rope_theta`.
    pub fn rope(&self) -> Result<RopeConfig> {
        let params = self.json.get("rope_parameters").filter(|v| v.is_object());
        let theta = self
            .json
            .get("rope_theta")
            .or_else(|| params.and_then(|p| p.get("rope_theta")))
            .and_then(Value::as_f64)
            .ok_or_else(|| {
                LlmError::config(
                    &self.path,
                    "no `rope_theta` (top level or in `rope_parameters`)",
                )
            })?;
        let scaling = self
            .json
            .get("rope_scaling")
            .filter(|v| !v.is_null())
            .or(params)
            .cloned();
        let rope_type = scaling
            .as_ref()
            .and_then(|s| s.get("rope_type").or_else(|| s.get("type")))
            .and_then(Value::as_str)
            .filter(|t| *t != "default")
            .map(str::to_string);
        Ok(RopeConfig {
            theta,
            rope_type,
            scaling,
        })
    }
}

/// `eos_token_id` as found in a config: one id or a list.
fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|n| n as u32).into_iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|n| n as u32)
            .collect(),
        _ => Vec::new(),
    }
}

/// The generation defaults of `generation_config.json` the CLI falls back to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationDefaults {
    /// Token ids that end generation: `eos_token_id` of generation_config.json and config.json.
    pub eos_token_ids: Vec<u32>,
    /// `do_sample`.
    pub do_sample: bool,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_p`.
    pub top_p: Option<f64>,
    /// `top_k`.
    pub top_k: Option<usize>,
}

impl GenerationDefaults {
    /// Reads `dir/generation_config.json` (optional) and the EOS ids of `config`.
    pub fn read(dir: &Path, config: &ModelConfig) -> Result<Self> {
        let path = dir.join("generation_config.json");
        let gen = if path.is_file() {
            read_json(&path)?
        } else {
            Value::Null
        };
        let mut eos = ids_of(gen.get("eos_token_id"));
        for id in ids_of(config.json().get("eos_token_id")) {
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
        Ok(Self {
            eos_token_ids: eos,
            do_sample: gen
                .get("do_sample")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            temperature: gen.get("temperature").and_then(Value::as_f64),
            top_p: gen.get("top_p").and_then(Value::as_f64),
            top_k: gen.get("top_k").and_then(Value::as_u64).map(|k| k as usize),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: Value) -> ModelConfig {
        ModelConfig {
            path: "config.json".into(),
            json,
        }
    }

    #[test]
    fn rope_theta_in_either_schema() {
        let top = config(serde_json::json!({"rope_theta": 5e5, "rope_scaling": null}));
        let r = top.rope().unwrap();
        assert_eq!((r.theta, r.rope_type, r.scaling), (5e5, None, None));

        let nested = config(serde_json::json!({
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}
        }));
        let r = nested.rope().unwrap();
        assert_eq!(r.theta, 1e6);
        assert_eq!(r.rope_type, None);

        let scaled = config(serde_json::json!({
            "rope_theta": 1e4, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}
        }));
        assert_eq!(scaled.rope().unwrap().rope_type.as_deref(), Some("yarn"));

        let missing = config(serde_json::json!({}));
        assert!(matches!(
            missing.rope(),
            Err(LlmError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn eos_ids_single_or_list() {
        assert_eq!(ids_of(Some(&serde_json::json!(7))), vec![7]);
        assert_eq!(ids_of(Some(&serde_json::json!([1, 2]))), vec![1, 2]);
        assert!(ids_of(None).is_empty());
    }

    #[test]
    fn wrong_model_type_is_typed() {
        let c = config(
            serde_json::json!({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}),
        );
        match c.check_model_type(&["qwen3"], "Qwen3") {
            Err(LlmError::WrongArchitecture { found, .. }) => {
                assert_eq!(found, "LlamaForCausalLM")
            }
            other => panic!("expected WrongArchitecture, got {other:?}"),
        }
        assert!(c.check_model_type(&["llama"], "Llama").is_ok());
    }
}
