//! The routes of `/api/v1` and `/metrics`, each handler a thin layer over
//! the job store: read the records, convert them ([`super::views`]), answer.

// utoipa's `params(...)` expands to paths the lint calls needless.
#![allow(unused_qualifications)]

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tidewater_jobs::{JobId, JobState, JobStore, NewJob, StoreError};
use utoipa::{IntoParams, OpenApi, ToSchema};

use super::history::{HistoryView, RunView, SampleView};
use super::intervals::{self, IntervalOption, IntervalsView};
use super::views::{
    ApiError, CheckpointView, CheckpointsView, ErrorView, ExposureView, JobView, JobsView,
    LastCheckpointView, LeaseView, ProgressView, SpecProblem,
};
use super::{auth, dashboard};

/// How long a client should wait before asking about a job in progress
/// again: about one heartbeat.
const RETRY_AFTER_SECONDS: &str = "2";

/// The most checkpoints one request returns.
const MAX_CHECKPOINTS: usize = 10_000;

/// The most samples one request returns (what the store keeps of a job).
const MAX_SAMPLES: usize = 5_000;

/// What every handler shares.
#[derive(Clone)]
pub struct Api {
    /// The job store.
    pub store: Arc<dyn JobStore>,
    /// The bearer token mutating requests need, if one is set.
    pub token: Option<Arc<str>>,
    /// The process's metrics, for `/metrics`.
    pub metrics: PrometheusHandle,
}

/// The API's OpenAPI document, generated from the handlers below.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "tidewater",
        description = "Jobs in a tidewater job store: list, watch, submit, cancel."
    ),
    paths(
        list_jobs,
        get_job,
        job_checkpoints,
        job_history,
        job_intervals,
        server,
        cancel_job,
        submit_job
    ),
    components(schemas(
        JobView, JobsView, ProgressView, LastCheckpointView, ExposureView, LeaseView, ErrorView,
        CheckpointView, CheckpointsView, ApiError, SpecProblem, StateFilter, HistoryView,
        SampleView, RunView, IntervalsView, IntervalOption, ServerView
    )),
    modifiers(&BearerToken)
)]
pub struct ApiDoc;

struct BearerToken;

impl utoipa::Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The router of the whole API.
pub fn router(api: Api) -> axum::Router {
    axum::Router::new()
        .route("/api/v1/jobs", get(list_jobs).post(submit_job))
        .route("/api/v1/jobs/{id}", get(get_job))
        .route("/api/v1/jobs/{id}/checkpoints", get(job_checkpoints))
        .route("/api/v1/jobs/{id}/history", get(job_history))
        .route("/api/v1/jobs/{id}/intervals", get(job_intervals))
        .route("/api/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/server", get(server))
        .route("/metrics", get(metrics))
        .merge(dashboard::router())
        .fallback(not_found)
        .with_state(api)
}

/// An error answer: a status and a JSON body with a code and a message.
#[derive(Debug)]
pub struct Problem(StatusCode, ApiError);

impl Problem {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Problem {
        Problem(status, ApiError::new(code, message))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.0, Json(self.1)).into_response();
        if self.0 == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Problem {
        let (status, code) = match &e {
            StoreError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            StoreError::Ambiguous { .. } => (StatusCode::BAD_REQUEST, "ambiguous"),
            StoreError::Held { .. } => (StatusCode::CONFLICT, "held"),
            StoreError::Illegal { .. } => (StatusCode::CONFLICT, "illegal_transition"),
            StoreError::Fenced { .. } => (StatusCode::CONFLICT, "fenced"),
            StoreError::Open { .. } | StoreError::Query { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            }
        };
        Problem::new(status, code, e.to_string())
    }
}

fn job_id(text: &str) -> Result<JobId, Problem> {
    text.parse::<JobId>().map_err(|_| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad_id",
            format!("'{text}' is not a job id: ids are integers (`GET /api/v1/jobs` lists them)"),
        )
    })
}

fn check_token(api: &Api, headers: &HeaderMap) -> Result<(), Problem> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth::authorized(api.token.as_deref(), given) {
        return Ok(());
    }
    Err(Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this server needs its token for changes: send `Authorization: Bearer TOKEN` \
         (the --http-token it was started with)",
    ))
}

async fn view(api: &Api, id: JobId) -> Result<JobView, Problem> {
    let job = api.store.get(id).await?;
    let last = api.store.checkpoints(id, 1).await?;
    Ok(JobView::of(&job, last.last()))
}

/// A job's answer: `202` with `Location` for an accepted change, and
/// `Retry-After` while the job is in progress.
fn job_response(status: StatusCode, job: JobView) -> Response {
    let location = format!("/api/v1/jobs/{}", job.id);
    let in_progress = job.in_progress();
    let mut response = (status, Json(job)).into_response();
    let headers = response.headers_mut();
    if status == StatusCode::ACCEPTED
        && let Ok(value) = HeaderValue::from_str(&location)
    {
        headers.insert(header::LOCATION, value);
    }
    if in_progress {
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
    }
    response
}

/// The value of query parameter `name` (its first, when repeated); the
/// query is read by hand so that a malformed one gets a JSON answer.
fn query_param(query: &Option<String>, name: &str) -> Option<String> {
    let query = query.as_deref()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// The `limit` query parameter: `default` when absent, else 1 to `max`.
fn limit_param(query: &Option<String>, default: usize, max: usize) -> Result<usize, Problem> {
    let Some(text) = query_param(query, "limit") else {
        return Ok(default);
    };
    text.parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "bad_limit",
                format!("limit '{text}' is not a number from 1 to {max}"),
            )
        })
}

/// A job state, as a filter.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
enum StateFilter {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelling,
    Cancelled,
}

/// The filters of `GET /api/v1/jobs` (for the document: the handler reads the raw query).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct ListQuery {
    /// Only jobs in this state.
    state: Option<StateFilter>,
}

/// The bounds of `GET /api/v1/jobs/{id}/checkpoints` (for the document).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct CheckpointsQuery {
    /// How many of the newest (default 100).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<u32>,
}

/// Every job, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "The jobs, newest first", body = JobsView),
        (status = 400, description = "An unknown state", body = ApiError),
        (status = 503, description = "The job store is unreachable", body = ApiError),
    )
)]
async fn list_jobs(
    State(api): State<Api>,
    RawQuery(query): RawQuery,
) -> Result<Json<JobsView>, Problem> {
    let state = match query_param(&query, "state").as_deref() {
        None => None,
        Some(text) => Some(
            text.parse::<JobState>()
                .map_err(|e| Problem::new(StatusCode::BAD_REQUEST, "bad_state", e.to_string()))?,
        ),
    };
    let jobs = api.store.list(state).await?;
    let mut views = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let last = api.store.checkpoints(job.id, 1).await?;
        views.push(JobView::of(job, last.last()));
    }
    Ok(Json(JobsView { jobs: views }))
}

/// One job.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}",
    params(("id" = i64, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job; `Retry-After` while it is in progress", body = JobView,
            headers(("Retry-After" = String, description = "Seconds until it is worth asking again, while the job is in progress"))),
        (status = 400, description = "Not a job id", body = ApiError),
        (status = 404, description = "No such job", body = ApiError),
        (status = 503, description = "The job store is unreachable", body = ApiError),
    )
)]
async fn get_job(State(api): State<Api>, Path(id): Path<String>) -> Result<Response, Problem> {
    let job = view(&api, job_id(&id)?).await?;
    Ok(job_response(StatusCode::OK, job))
}

/// A job's last checkpoints, oldest first, with the time of each phase.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}/checkpoints",
    params(("id" = i64, Path, description = "The job's id"), CheckpointsQuery),
    responses(
        (status = 200, description = "Its checkpoints, oldest first", body = CheckpointsView),
        (status = 400, description = "Not a job id, or a bad limit", body = ApiError),
        (status = 404, description = "No such job", body = ApiError),
        (status = 503, description = "The job store is unreachable", body = ApiError),
    )
)]
async fn job_checkpoints(
    State(api): State<Api>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<CheckpointsView>, Problem> {
    let id = job_id(&id)?;
    let limit = limit_param(&query, 100, MAX_CHECKPOINTS)?;
    api.store.get(id).await?;
    let checkpoints = api.store.checkpoints(id, limit).await?;
    Ok(Json(CheckpointsView {
        job: id,
        checkpoints: checkpoints.iter().map(CheckpointView::of).collect(),
    }))
}

/// The bounds of `GET /api/v1/jobs/{id}/history` (for the document).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct HistoryQuery {
    /// How many of the newest samples (default 2000).
    #[param(minimum = 1, maximum = 5000)]
    limit: Option<u32>,
}

/// A job over time: its samples (rate, exposure, throttle, replica lag,
/// dead letters), oldest first, and the runs they came from with each
/// run's restore.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}/history",
    params(("id" = i64, Path, description = "The job's id"), HistoryQuery),
    responses(
        (status = 200, description = "Its samples and runs, oldest first", body = HistoryView),
        (status = 400, description = "Not a job id, or a bad limit", body = ApiError),
        (status = 404, description = "No such job", body = ApiError),
        (status = 503, description = "The job store is unreachable", body = ApiError),
    )
)]
async fn job_history(
    State(api): State<Api>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<HistoryView>, Problem> {
    let id = job_id(&id)?;
    let limit = limit_param(&query, 2000, MAX_SAMPLES)?;
    api.store.get(id).await?;
    let samples = api.store.samples(id, limit).await?;
    Ok(Json(HistoryView::of(id, &samples)))
}

/// What other checkpoint intervals would cost and save this job: the
/// share of time its checkpoints would hold the tasks, and the rows a
/// crash would redo, at the job's recent rate (its last run's last rate
/// once it ended) and its checkpoints' pauses.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}/intervals",
    params(("id" = i64, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The estimate, shortest interval first", body = IntervalsView),
        (status = 400, description = "Not a job id", body = ApiError),
        (status = 404, description = "No such job", body = ApiError),
        (status = 503, description = "The job store is unreachable", body = ApiError),
    )
)]
async fn job_intervals(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<IntervalsView>, Problem> {
    let id = job_id(&id)?;
    let job = api.store.get(id).await?;
    let checkpoints = api.store.checkpoints(id, 20).await?;
    // A job that ended reports no rate: its last run's last known one.
    let rate = match job.progress.rows_per_second {
        Some(rate) => Some(rate),
        None => api
            .store
            .samples(id, 20)
            .await?
            .iter()
            .rev()
            .find_map(|s| s.rows_per_second),
    };
    Ok(Json(intervals::estimate(id, rate, &checkpoints)))
}

/// The options of `POST /api/v1/jobs/{id}/cancel` (for the document).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct CancelQuery {
    /// Take no savepoint: the worker stops at once and aborts what its
    /// last completed checkpoint does not hold (`tidewater cancel --discard`).
    discard: Option<bool>,
}

/// Asks a job to stop: a running job's worker sees CANCELLING within one
/// heartbeat, takes a savepoint (none with `discard=true`) and ends
/// CANCELLED; a queued job is cancelled at once.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/cancel",
    params(("id" = i64, Path, description = "The job's id"), CancelQuery),
    security((), ("token" = [])),
    responses(
        (status = 202, description = "The cancel is recorded; `Location` is the job", body = JobView,
            headers(("Location" = String, description = "The job's resource"))),
        (status = 400, description = "Not a job id, or `discard` not true or false", body = ApiError),
        (status = 401, description = "The server's token is missing or wrong", body = ApiError),
        (status = 404, description = "No such job", body = ApiError),
        (status = 409, description = "The job already ended", body = ApiError),
        (status = 503, description = "The job store is unreachable", body = ApiError),
    )
)]
async fn cancel_job(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, Problem> {
    check_token(&api, &headers)?;
    let id = job_id(&id)?;
    let discard = match query_param(&query, "discard").as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "bad_discard",
                format!("discard '{other}' is not true or false"),
            ));
        }
    };
    api.store.cancel(id, discard).await?;
    Ok(job_response(StatusCode::ACCEPTED, view(&api, id).await?))
}

/// Submits a spec (TOML, as `tidewater run` reads it) as a QUEUED job,
/// which `tidewater serve --run N` executes. The same `Idempotency-Key`
/// again answers with the same job, never a second one; so does the same
/// job name and state location.
#[utoipa::path(
    post,
    path = "/api/v1/jobs",
    request_body(content = String, content_type = "text/plain", description = "The spec, as TOML"),
    params(("Idempotency-Key" = Option<String>, Header, description = "Submitting again with this key answers with the first submission's job")),
    security((), ("token" = [])),
    responses(
        (status = 202, description = "Accepted: the job (new, or the one of this key); `Location` is its resource", body = JobView,
            headers(
                ("Location" = String, description = "The job's resource"),
                ("Retry-After" = String, description = "Seconds until it is worth asking again, while the job is in progress"),
            )),
        (status = 400, description = "The spec does not validate: each problem at its line, as `tidewater validate` reports them", body = ApiError),
        (status = 401, description = "The server's token is missing or wrong", body = ApiError),
        (status = 503, description = "The job store is unreachable", body = ApiError),
    )
)]
async fn submit_job(
    State(api): State<Api>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    check_token(&api, &headers)?;
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .map(str::trim)
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    Problem::new(
                        StatusCode::BAD_REQUEST,
                        "bad_idempotency_key",
                        "the Idempotency-Key header must be 1 to 255 visible ASCII characters",
                    )
                })?
                .to_string(),
        ),
    };
    let text = std::str::from_utf8(&body).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_spec",
            format!("the spec is not UTF-8 text ({e}): send the TOML file as it is"),
        )
    })?;
    let spec = super::validated(text).await.map_err(|d| {
        let problems = d
            .located()
            .into_iter()
            .map(|(line, column, message)| SpecProblem {
                line,
                column,
                message,
            })
            .collect();
        Problem(
            StatusCode::BAD_REQUEST,
            ApiError {
                code: "invalid_spec".into(),
                message: d.to_string(),
                problems,
            },
        )
    })?;
    let submitted = api
        .store
        .submit(NewJob {
            name: spec.job.name.clone(),
            state_url: crate::commands::run::identity(&spec.job.state),
            spec: text.to_string(),
            spec_path: None,
            idempotency_key: key,
        })
        .await?;
    let job = view(&api, submitted.job().id).await?;
    Ok(job_response(StatusCode::ACCEPTED, job))
}

/// What a client needs to know of this server before it acts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, ToSchema)]
pub struct ServerView {
    /// The `tidewater` version serving.
    pub version: String,
    /// Whether submitting and cancelling need `Authorization: Bearer TOKEN`.
    pub changes_need_token: bool,
}

/// This server: its version, and whether changes need its token (the
/// dashboard asks for the token before a cancel, not after a refusal).
#[utoipa::path(
    get,
    path = "/api/v1/server",
    responses((status = 200, description = "This server", body = ServerView))
)]
async fn server(State(api): State<Api>) -> Json<ServerView> {
    Json(ServerView {
        version: env!("CARGO_PKG_VERSION").to_string(),
        changes_need_token: api.token.is_some(),
    })
}

async fn openapi() -> Response {
    match ApiDoc::openapi().to_json() {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            .into_response(),
    }
}

async fn metrics(State(api): State<Api>) -> Response {
    // The per-job gauges from the store; a store that cannot be read
    // leaves them as last set, and the process's own metrics still answer.
    if let Ok(jobs) = api.store.list(None).await {
        super::metrics::record_jobs(&jobs);
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        api.metrics.render(),
    )
        .into_response()
}

async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such resource: the API is under /api/v1 (its OpenAPI document is /api/v1/openapi.json), metrics at /metrics",
    )
}
