//! The HTTP API of `tidewater run --http ADDR` and `tidewater serve`: the
//! job store's jobs as JSON under `/api/v1` (list, one job, its
//! checkpoints, cancel, submit), its OpenAPI document at
//! `/api/v1/openapi.json`, the process's Prometheus metrics at
//! `/metrics`, and a dashboard of it all at `/`. Loopback by default; any other address needs a token,
//! which every mutating request must then carry.

pub mod api;
pub mod auth;
pub mod dashboard;
pub mod history;
pub mod intervals;
pub mod metrics;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tidewater_core::events::InternalEvent;
use tidewater_jobs::JobStore;

use crate::events::ApiListening;
use crate::spec::{Diagnostics, Spec};

/// The flags of the API.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    /// Serve the HTTP API and /metrics on this address (e.g.
    /// 127.0.0.1:7373). Any address but loopback needs --http-token.
    #[arg(long = "http", value_name = "ADDR")]
    pub addr: Option<SocketAddr>,
    /// The bearer token that cancelling and submitting over HTTP need (at
    /// least 16 characters); required to listen beyond loopback.
    #[arg(
        long = "http-token",
        env = "TIDEWATER_HTTP_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

impl HttpArgs {
    /// Whether these flags may be used (`Err`: why not, and what to do).
    pub fn check(&self) -> Result<(), String> {
        match self.addr {
            Some(addr) => auth::may_bind(addr, self.token.as_deref()),
            None => Ok(()),
        }
    }
}

/// A running API server.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Stops serving.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// Binds `addr` (refused beyond loopback without a token) and serves the
/// API over `store` until stopped.
pub async fn start(
    addr: SocketAddr,
    token: Option<&str>,
    store: Arc<dyn JobStore>,
) -> anyhow::Result<Server> {
    auth::may_bind(addr, token).map_err(anyhow::Error::msg)?;
    let metrics = metrics::handle().map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --http; is the port in use?"))?;
    let addr = listener.local_addr().unwrap_or(addr);
    let app = api::router(api::Api {
        store,
        token: token.map(|t| Arc::from(t.trim())),
        metrics,
    });
    ApiListening {
        addr,
        token: token.is_some(),
    }
    .emit();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            crate::events::ApiStopped { error: &e }.emit();
        }
    });
    Ok(Server { addr, task })
}

/// Reads and validates a submitted spec as `tidewater validate` does
/// (without connecting): the spec, or every problem at its line.
pub async fn validated(text: &str) -> Result<Spec, Diagnostics> {
    let spec = crate::commands::read_spec("submitted.toml", text)?;
    match crate::build::validate(&spec, false).await {
        Ok(()) => Ok(spec),
        Err(crate::build::BuildError::Spec(d) | crate::build::BuildError::Connect(d)) => Err(d),
    }
}
