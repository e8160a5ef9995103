//! An OpenAI-compatible HTTP server for DF11 (and plain BF16) language models, with continuous
//! batching: requests join and leave the running batch between decode steps
//! (`df11_llm::serving`'s scheduler, on the engine of `df11_llm`: ragged batches over
//! per-sequence KV-cache slots; on CUDA a captured graph per bucket of rows).
//!
//! Endpoints ([`routes`]): `GET /health`, `GET /metrics` (Prometheus), and, behind
//! `Authorization: Bearer <key>` when a key is set, `GET /v1/models`,
//! `POST /v1/chat/completions`, `POST /v1/completions` (streaming as server-sent events, `usage`,
//! `max_tokens`, `temperature`, `top_p`, `seed`, `stop`, `n = 1`). Bad requests get OpenAI's
//! error object with a 4xx ([`api`]) and the server goes on.
//!
//! The `df11 serve` command (crate `df11-cli`) runs it for any architecture.

#![warn(missing_docs)]

pub mod api;
pub mod routes;

use std::net::SocketAddr;
use std::sync::Arc;

use df11_llm::{Loaded, Result as LlmResult};

use df11_llm::serving::{Metrics, Scheduler};

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on.
    pub host: String,
    /// Port (0: any free port; the one taken is printed).
    pub port: u16,
    /// Requests to `/v1/*` must carry `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// The model name clients use (`/v1/models`, the `model` field).
    pub served_model_name: String,
    /// Sequences decoded together.
    pub max_batch: usize,
    /// Requests waiting for a slot before new ones get 429.
    pub max_queue: usize,
    /// Largest request body (413 above).
    pub max_body_bytes: usize,
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Loading the model failed.
    #[error(transparent)]
    Model(#[from] df11_llm::LlmError),
    /// The address could not be bound, or serving failed.
    #[error("{addr}: {source}")]
    Io {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Loads the model with `load` (on the engine's own thread), binds, prints
/// `listening on http://ADDR` to stderr and serves until Ctrl-C or SIGTERM: then it stops taking
/// connections, lets the requests in flight finish and returns `Ok` (a second signal ends the
/// process at once, with status 130).
pub fn serve(
    config: ServerConfig,
    load: Box<dyn FnOnce() -> LlmResult<Loaded> + Send>,
) -> Result<(), ServerError> {
    let io = |addr: &str, source| ServerError::Io {
        addr: addr.to_string(),
        source,
    };
    let addr = format!("{}:{}", config.host, config.port);
    let metrics = Arc::new(Metrics::default());
    let (scheduler, info) =
        Scheduler::start(load, config.max_batch, config.max_queue, metrics.clone())?;
    // A handle kept out of the server's tasks, to stop the model's thread below (an early
    // return stops it too: the last handle dropped joins it).
    let owner = scheduler.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| io(&addr, e))?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| io(&addr, e))?;
        let local: SocketAddr = listener.local_addr().map_err(|e| io(&addr, e))?;
        // The handlers are in place before the address is printed: a signal sent as soon as a
        // client sees it is caught (were it to come earlier, a process whose parent ignores
        // SIGINT would ignore it and serve on).
        let signals = Signals::register().map_err(|e| io(&addr, e))?;
        eprintln!(
            "serving {} (context {}, batch {}) as `{}`; listening on http://{local}",
            info.arch, info.max_context, info.max_batch, config.served_model_name
        );
        let app = Arc::new(routes::App {
            config,
            info,
            scheduler,
            metrics,
        });
        axum::serve(listener, routes::router(app))
            .with_graceful_shutdown(shutdown_signal(signals))
            .await
            .map_err(|e| io(&addr, e))?;
        eprintln!("server stopped");
        Ok(())
    });
    // The runtime (and any connection it still holds) goes first, then the model's thread is
    // stopped and joined: the model is dropped on its own thread before this returns.
    drop(runtime);
    owner.shutdown();
    served
}

/// Ctrl-C (SIGINT) and, on Unix, SIGTERM, registered with the runtime.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers now (inside the runtime).
    fn register() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The next signal.
    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves at the first Ctrl-C or SIGTERM, after arranging for the next one to end the process.
async fn shutdown_signal(mut signals: Signals) {
    signals.next().await;
    eprintln!(
        "shutting down: no new connections; requests in flight finish (Ctrl-C again to stop now)"
    );
    tokio::spawn(async move {
        signals.next().await;
        eprintln!("stopped");
        // At once, without the exit handlers: the model's thread may be using CUDA right now.
        df11_llm::exit_now(130);
    });
}
