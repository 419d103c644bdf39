//! The web UI: `GET /` and its two assets, compiled into the binary (`include_str!`), so the
//! JobManager needs nothing at build time beyond rustc and loads nothing from outside at run
//! time. The page reads the REST API beside it and refreshes every second.

use axum::http::header;
use axum::response::IntoResponse;

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The binary is the version: a restarted JobManager of another build serves its own.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

pub(super) async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX)
}

pub(super) async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(super) async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}
