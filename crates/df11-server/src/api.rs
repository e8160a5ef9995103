//! The OpenAI API's request bodies as this server reads them, and their checks: everything a
//! request can get wrong becomes an [`ApiError`] (a 4xx with OpenAI's error object) before it
//! reaches the model.

use serde::Deserialize;
use serde_json::{json, Value};

/// Stop sequences a request may give (OpenAI allows up to 4).
const MAX_STOPS: usize = 4;

/// An error answered to the client: HTTP status and OpenAI's `{"error": {...}}` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// A message for people.
    pub message: String,
    /// OpenAI's `type` (`invalid_request_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// OpenAI's `code` (`model_not_found`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.to_string()),
            code: None,
        }
    }

    /// An error of `status` with no particular field.
    pub fn status(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One sequence.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// A chat message's `content`: a string, or a list of parts of which the `text` ones count.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// `[{"type": "text", "text": "..."}, ...]`.
    Parts(Vec<Part>),
}

/// One part of a message's content.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    /// `text` (other types are refused).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

/// One message of a chat request.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: Option<Content>,
}

/// What generation a request asks for, common to both endpoints.
#[derive(Debug, Clone, Deserialize)]
pub struct Sampling {
    /// The model name (must be the served one).
    pub model: String,
    /// Tokens to generate at most (`max_completion_tokens` is read as the same).
    pub max_tokens: Option<i64>,
    /// The newer name of `max_tokens`.
    pub max_completion_tokens: Option<i64>,
    /// 0 (greedy) to 2.
    pub temperature: Option<f64>,
    /// Nucleus sampling, (0, 1].
    pub top_p: Option<f64>,
    /// Seed of the sampler.
    pub seed: Option<u64>,
    /// Sequences that end generation (not included in the text).
    pub stop: Option<Stop>,
    /// Completions per prompt: only 1.
    pub n: Option<i64>,
    /// Server-sent events instead of one JSON object.
    #[serde(default)]
    pub stream: bool,
    /// `{"include_usage": true}` adds a usage chunk to a stream.
    pub stream_options: Option<Value>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Extra values for the chat template (as vLLM takes them): `enable_thinking` is read.
    pub chat_template_kwargs: Option<Value>,
    /// The rest.
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// `prompt` of a completion: a string, or a list holding one string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    /// One prompt.
    One(String),
    /// `["..."]`.
    Many(Vec<String>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The prompt.
    pub prompt: PromptInput,
    /// The rest.
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// The checked generation parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// Tokens to generate at most (`None`: until EOS or the context is full).
    pub max_tokens: Option<usize>,
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Sampler seed.
    pub seed: u64,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Streamed answer.
    pub stream: bool,
    /// A usage chunk at the end of a stream.
    pub include_usage: bool,
}

/// Parses a request body: invalid UTF-8, malformed JSON and wrong types are 400s.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::invalid("body", format!("the body is not UTF-8: {e}")))?;
    serde_json::from_str(text)
        .map_err(|e| ApiError::invalid("body", format!("invalid request body: {e}")))
}

impl Sampling {
    /// Checks the fields against the served model's name and context.
    pub fn check(&self, served: &str, max_context: usize) -> Result<Checked, ApiError> {
        if self.model != served {
            return Err(ApiError {
                status: 404,
                message: format!(
                    "the model `{}` does not exist; this server runs `{served}`",
                    self.model
                ),
                kind: "invalid_request_error",
                param: Some("model".into()),
                code: Some("model_not_found"),
            });
        }
        let max_tokens = match self.max_completion_tokens.or(self.max_tokens) {
            None => None,
            Some(n) if n < 1 => {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!("max_tokens {n} is below 1"),
                ))
            }
            Some(n) if n as u64 > max_context as u64 => {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!("max_tokens {n} exceeds the model's context of {max_context} tokens"),
                ))
            }
            Some(n) => Some(n as usize),
        };
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::invalid(
                "temperature",
                format!("temperature {temperature} is not in [0, 2]"),
            ));
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(ApiError::invalid(
                    "top_p",
                    format!("top_p {p} is not in (0, 1]"),
                ));
            }
        }
        if let Some(n) = self.n.filter(|n| *n != 1) {
            return Err(ApiError::invalid(
                "n",
                format!("n = {n}: only n = 1 is supported"),
            ));
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOPS || stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid(
                "stop",
                "stop takes 1 to 4 non-empty sequences",
            ));
        }
        let include_usage = self
            .stream_options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Checked {
            max_tokens,
            temperature,
            top_p: self.top_p,
            // No seed: a fresh one, so that sampled answers differ as OpenAI's do.
            seed: self.seed.unwrap_or_else(fresh_seed),
            stop,
            stream: self.stream,
            include_usage,
        })
    }
}

impl ChatRequest {
    /// The chat template's `enable_thinking`: `chat_template_kwargs.enable_thinking`, else off
    /// (as `df11 run` without `--thinking`: a template that tests the flag gets `false`).
    pub fn enable_thinking(&self) -> Result<bool, ApiError> {
        let Some(kwargs) = &self.chat_template_kwargs else {
            return Ok(false);
        };
        if !kwargs.is_object() {
            return Err(ApiError::invalid(
                "chat_template_kwargs",
                "chat_template_kwargs must be an object",
            ));
        }
        match kwargs.get("enable_thinking") {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ApiError::invalid(
                "chat_template_kwargs",
                "chat_template_kwargs.enable_thinking must be a boolean",
            )),
        }
    }

    /// The messages as `(role, text)`, checked: at least one, known roles, text content.
    pub fn messages(&self) -> Result<Vec<(String, String)>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid("messages", "messages is empty"));
        }
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let role = match m.role.as_str() {
                    "system" | "developer" => "system",
                    "user" => "user",
                    "assistant" => "assistant",
                    other => {
                        return Err(ApiError::invalid(
                            &format!("messages[{i}].role"),
                            format!("unknown role `{other}`"),
                        ))
                    }
                };
                let text = match &m.content {
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(parts)) => {
                        let mut text = String::new();
                        for p in parts {
                            match (p.kind.as_str(), &p.text) {
                                ("text", Some(t)) => text.push_str(t),
                                (kind, _) => {
                                    return Err(ApiError::invalid(
                                        &format!("messages[{i}].content"),
                                        format!("content parts of type `{kind}` are not supported"),
                                    ))
                                }
                            }
                        }
                        text
                    }
                };
                Ok((role.to_string(), text))
            })
            .collect()
    }
}

impl CompletionRequest {
    /// The one prompt.
    pub fn prompt(&self) -> Result<&str, ApiError> {
        match &self.prompt {
            PromptInput::One(p) => Ok(p),
            PromptInput::Many(v) if v.len() == 1 => Ok(&v[0]),
            PromptInput::Many(v) => Err(ApiError::invalid(
                "prompt",
                format!("{} prompts: only one per request is supported", v.len()),
            )),
        }
    }
}

/// A seed no other request is likely to get (std only: this file is also fuzzed on its own).
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<(ChatRequest, Checked), ApiError> {
        let r: ChatRequest = parse(body.to_string().as_bytes())?;
        let c = r.sampling.check("m", 100)?;
        r.messages()?;
        Ok((r, c))
    }

    #[test]
    fn good_requests_and_defaults() {
        let (r, c) = chat(json!({"model": "m", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}
        ], "max_tokens": 5, "temperature": 0, "stop": "x", "stream": true,
           "stream_options": {"include_usage": true}, "user": "ignored"}))
        .unwrap();
        assert_eq!(r.messages().unwrap()[1], ("user".into(), "hi".into()));
        assert_eq!(c.max_tokens, Some(5));
        assert_eq!(c.stop, vec!["x".to_string()]);
        assert!(c.stream && c.include_usage);
        let (r, c) =
            chat(json!({"model": "m", "messages": [{"role": "user", "content": "a"}]})).unwrap();
        assert_eq!((c.max_tokens, c.temperature), (None, 1.0));
        assert!(!r.enable_thinking().unwrap());
        // Without a seed, each request draws its own.
        let (_, c2) =
            chat(json!({"model": "m", "messages": [{"role": "user", "content": "a"}]})).unwrap();
        assert_ne!(c.seed, c2.seed);
        let (_, c) = chat(json!({"model": "m", "seed": 7,
            "messages": [{"role": "user", "content": "a"}]}))
        .unwrap();
        assert_eq!(c.seed, 7);
    }

    #[test]
    fn thinking_is_read_from_chat_template_kwargs() {
        let msgs = json!([{"role": "user", "content": "a"}]);
        let thinking = |kwargs: Value| {
            chat(json!({"model": "m", "messages": msgs, "chat_template_kwargs": kwargs}))
                .unwrap()
                .0
                .enable_thinking()
        };
        assert!(thinking(json!({"enable_thinking": true})).unwrap());
        assert!(!thinking(json!({"enable_thinking": false})).unwrap());
        assert!(!thinking(json!({"other": 1})).unwrap());
        assert!(thinking(json!({"enable_thinking": "yes"})).is_err());
        assert!(thinking(json!([1])).is_err());
    }

    #[test]
    fn bad_requests_are_4xx() {
        for (body, status, param) in [
            (
                json!({"model": "other", "messages": [{"role": "user", "content": "a"}]}),
                404,
                "model",
            ),
            (json!({"model": "m", "messages": []}), 400, "messages"),
            (
                json!({"model": "m", "messages": [{"role": "robot", "content": "a"}]}),
                400,
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": -3}),
                400,
                "max_tokens",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": 1_000_000_000_000i64}),
                400,
                "max_tokens",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "a"}], "temperature": 3}),
                400,
                "temperature",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "a"}], "top_p": 0}),
                400,
                "top_p",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "a"}], "n": 2}),
                400,
                "n",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "a"}], "stop": ["a","b","c","d","e"]}),
                400,
                "stop",
            ),
            (json!({"model": "m", "messages": "hello"}), 400, "body"),
            (
                json!({"model": 7, "messages": [{"role": "user", "content": "a"}]}),
                400,
                "body",
            ),
        ] {
            let e = chat(body.clone()).unwrap_err();
            assert_eq!(
                (e.status, e.param.as_deref()),
                (status, Some(param)),
                "{body}"
            );
        }
        let e = parse::<ChatRequest>(b"{not json").unwrap_err();
        assert_eq!(e.status, 400);
        let e = parse::<ChatRequest>(b"{\"model\": \"\xff\"}").unwrap_err();
        assert!(e.message.contains("UTF-8"), "{}", e.message);
        assert_eq!(e.body()["error"]["type"], "invalid_request_error");
    }
}
