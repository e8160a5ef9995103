//! The HTTP endpoints: `GET /health`, `GET /metrics`, and, behind the API key when one is set,
//! `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions` (one JSON object, or
//! server-sent events with `stream`). Every refusal is OpenAI's error object with a 4xx.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use df11_llm::{encode, Message, SamplingParams};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::api::{parse, ApiError, ChatRequest, Checked, CompletionRequest};
use crate::ServerConfig;
use df11_llm::serving::{Event, EventSink, Metrics, ModelInfo, Request, Scheduler, SubmitError};

/// What every handler shares.
pub struct App {
    /// The settings.
    pub config: ServerConfig,
    /// The model's tokenizer, template, context.
    pub info: ModelInfo,
    /// The engine thread.
    pub scheduler: Scheduler,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

type AppState = State<Arc<App>>;

/// The router over `app`.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .fallback(not_found)
        .with_state(app)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, Json(self.body())).into_response()
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn metrics(State(app): AppState) -> impl IntoResponse {
    let text = app.metrics.render(app.scheduler.queued());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

async fn not_found() -> ApiError {
    ApiError::status(404, "invalid_request_error", "no such endpoint")
}

/// `Authorization: Bearer <key>`, when the server has a key.
fn authorize(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &app.config.api_key else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError {
            status: 401,
            message: "missing or wrong API key (Authorization: Bearer <key>)".into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        })
    }
}

async fn models(State(app): AppState, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    authorize(&app, &headers)?;
    Ok(Json(json!({"object": "list", "data": [{
        "id": app.config.served_model_name,
        "object": "model",
        "created": 0,
        "owned_by": "df11",
    }]})))
}

/// The body, at most the configured size (413 above).
async fn body_bytes(app: &App, body: Body) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, app.config.max_body_bytes)
        .await
        .map_err(|_| {
            ApiError::status(
                413,
                "invalid_request_error",
                format!(
                    "the request body exceeds {} bytes",
                    app.config.max_body_bytes
                ),
            )
        })
}

/// Which endpoint a generation answers.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

async fn chat(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    app.metrics.request();
    let prepared = async {
        authorize(&app, &headers)?;
        let request: ChatRequest = parse(&body_bytes(&app, body).await?)?;
        let checked = request
            .sampling
            .check(&app.config.served_model_name, app.info.max_context)?;
        let messages: Vec<Message> = request
            .messages()?
            .into_iter()
            .map(|(role, content)| Message { role, content })
            .collect();
        let template = app.info.chat_template.as_ref().ok_or_else(|| {
            ApiError::invalid(
                "messages",
                "the model has no chat template: use /v1/completions",
            )
        })?;
        // Thinking off unless the request asks (as `df11 run` without --thinking), so a
        // template that tests `enable_thinking` renders the same prompt as the CLI's.
        let thinking = request.enable_thinking()?;
        let text = template
            .render(&messages, true, Some(thinking))
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        let ids = encode(&app.info.tokenizer, &text, false)
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        Ok::<_, ApiError>((ids, checked))
    }
    .await;
    generate(app, prepared, Kind::Chat).await
}

async fn completions(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    app.metrics.request();
    let prepared = async {
        authorize(&app, &headers)?;
        let request: CompletionRequest = parse(&body_bytes(&app, body).await?)?;
        let checked = request
            .sampling
            .check(&app.config.served_model_name, app.info.max_context)?;
        let ids = encode(&app.info.tokenizer, request.prompt()?, true)
            .map_err(|e| ApiError::invalid("prompt", e.to_string()))?;
        Ok::<_, ApiError>((ids, checked))
    }
    .await;
    generate(app, prepared, Kind::Completion).await
}

/// Queues a checked request and answers it, as one object or as a stream.
async fn generate(
    app: Arc<App>,
    prepared: Result<(Vec<u32>, Checked), ApiError>,
    kind: Kind,
) -> Response {
    let (ids, checked) = match prepared {
        Ok(x) => x,
        Err(e) => {
            app.metrics.rejected();
            return e.into_response();
        }
    };
    let context = app.info.max_context;
    if ids.is_empty() || ids.len() >= context {
        app.metrics.rejected();
        return ApiError::invalid(
            if kind == Kind::Chat {
                "messages"
            } else {
                "prompt"
            },
            format!(
                "the prompt is {} tokens; the model's context is {context} tokens",
                ids.len()
            ),
        )
        .into_response();
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let request = Request {
        prompt: ids,
        max_tokens: checked.max_tokens,
        sampling: SamplingParams {
            temperature: checked.temperature,
            top_p: checked.top_p,
            top_k: None,
            seed: checked.seed,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
        },
        stop: checked.stop.clone(),
        events: Box::new(AsyncSink(tx)),
        received: Instant::now(),
    };
    match app.scheduler.submit(request) {
        Ok(()) => {}
        Err(SubmitError::Full) => {
            app.metrics.rejected();
            return ApiError::status(429, "rate_limit_exceeded", "the request queue is full")
                .into_response();
        }
        Err(SubmitError::Stopped) => {
            return ApiError::status(503, "server_error", "the model has stopped").into_response();
        }
    }
    let id = format!(
        "{}-{}",
        if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
        uuid_like()
    );
    if checked.stream {
        stream(app, rx, id, kind, checked.include_usage)
    } else {
        whole(app, rx, id, kind).await
    }
}

/// The scheduler's events into a tokio channel (the handler awaits them).
struct AsyncSink(mpsc::UnboundedSender<Event>);

impl EventSink for AsyncSink {
    fn send(&self, event: Event) -> bool {
        self.0.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// A request id: the time in nanoseconds and a counter.
fn uuid_like() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{t:x}{n:04x}")
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion})
}

/// Collects the whole answer.
async fn whole(
    app: Arc<App>,
    mut rx: mpsc::UnboundedReceiver<Event>,
    id: String,
    kind: Kind,
) -> Response {
    let mut text = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Failed(e) => {
                return ApiError::status(500, "server_error", e).into_response();
            }
            Event::Done {
                reason,
                prompt_tokens,
                completion_tokens,
                ..
            } => {
                let choice = match kind {
                    Kind::Chat => json!({"index": 0, "finish_reason": reason.as_str(),
                        "message": {"role": "assistant", "content": text}, "logprobs": null}),
                    Kind::Completion => json!({"index": 0, "finish_reason": reason.as_str(),
                        "text": text, "logprobs": null}),
                };
                let object = match kind {
                    Kind::Chat => "chat.completion",
                    Kind::Completion => "text_completion",
                };
                return Json(json!({
                    "id": id, "object": object, "created": now(),
                    "model": app.config.served_model_name, "choices": [choice],
                    "usage": usage(prompt_tokens, completion_tokens),
                }))
                .into_response();
            }
        }
    }
    ApiError::status(500, "server_error", "the model stopped without an answer").into_response()
}

/// Streams the answer as server-sent events, OpenAI's chunks, then `[DONE]`.
fn stream(
    app: Arc<App>,
    mut rx: mpsc::UnboundedReceiver<Event>,
    id: String,
    kind: Kind,
    include_usage: bool,
) -> Response {
    let (out, sse) = mpsc::unbounded_channel::<Result<SseEvent, Infallible>>();
    let model = app.config.served_model_name.clone();
    let created = now();
    let object = match kind {
        Kind::Chat => "chat.completion.chunk",
        Kind::Completion => "text_completion",
    };
    let chunk = move |delta: Option<&str>, reason: Option<&str>, first: bool| -> Value {
        let choice = match kind {
            Kind::Chat => {
                let mut d = json!({});
                if first {
                    d["role"] = json!("assistant");
                }
                if let Some(t) = delta {
                    d["content"] = json!(t);
                }
                json!({"index": 0, "delta": d, "finish_reason": reason, "logprobs": null})
            }
            Kind::Completion => json!({"index": 0, "text": delta.unwrap_or(""),
                                       "finish_reason": reason, "logprobs": null}),
        };
        json!({"id": id, "object": object, "created": created, "model": model,
               "choices": [choice]})
    };
    tokio::spawn(async move {
        let send = |v: Value| {
            out.send(Ok(SseEvent::default().data(v.to_string())))
                .is_ok()
        };
        let mut first = true;
        if kind == Kind::Chat && !send(chunk(Some(""), None, true)) {
            return;
        }
        first &= kind != Kind::Chat;
        while let Some(event) = rx.recv().await {
            match event {
                Event::Text(t) => {
                    if !send(chunk(Some(&t), None, first)) {
                        return; // the client went away: dropping rx cancels the request
                    }
                    first = false;
                }
                Event::Failed(e) => {
                    let e = ApiError::status(500, "server_error", e);
                    let _ = send(e.body());
                    break;
                }
                Event::Done {
                    reason,
                    prompt_tokens,
                    completion_tokens,
                    ..
                } => {
                    let mut last = chunk(None, Some(reason.as_str()), first);
                    if include_usage {
                        last["usage"] = usage(prompt_tokens, completion_tokens);
                    }
                    if !send(last) {
                        return;
                    }
                    break;
                }
            }
        }
        let _ = out.send(Ok(SseEvent::default().data("[DONE]")));
    });
    Sse::new(UnboundedReceiverStream::new(sse)).into_response()
}
