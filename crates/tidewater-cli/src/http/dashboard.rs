//! The dashboard at `/`: a page, its script and its style, and uPlot (the
//! charts, vendored from the npm registry with its licence), all embedded
//! in the binary, so nothing is built or fetched on the user's side. The
//! page reads the same `/api/v1` as every other client.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// An embedded file: its media type and its bytes.
struct Asset {
    path: &'static str,
    media_type: &'static str,
    body: &'static str,
}

const ASSETS: [Asset; 5] = [
    Asset {
        path: "/",
        media_type: "text/html; charset=utf-8",
        body: include_str!("../../assets/dashboard/index.html"),
    },
    Asset {
        path: "/dashboard/app.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("../../assets/dashboard/app.js"),
    },
    Asset {
        path: "/dashboard/app.css",
        media_type: "text/css; charset=utf-8",
        body: include_str!("../../assets/dashboard/app.css"),
    },
    Asset {
        path: "/dashboard/vendor/uPlot.iife.min.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("../../assets/dashboard/vendor/uplot/uPlot.iife.min.js"),
    },
    Asset {
        path: "/dashboard/vendor/uPlot.min.css",
        media_type: "text/css; charset=utf-8",
        body: include_str!("../../assets/dashboard/vendor/uplot/uPlot.min.css"),
    },
];

/// Scripts and styles from this server only, nothing inline: an injected
/// job name cannot run as script.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

fn answer(asset: &'static Asset) -> Response {
    let mut response = asset.body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.media_type),
    );
    // Small files, and a new binary may bring new ones: always revalidated.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The dashboard's routes.
pub fn router<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
    ASSETS.iter().fold(axum::Router::new(), |router, asset| {
        router.route(asset.path, get(move || async move { answer(asset) }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_names_is_served() {
        let page = ASSETS[0].body;
        for asset in &ASSETS[1..] {
            assert!(
                page.contains(asset.path),
                "index.html does not load {}",
                asset.path
            );
        }
    }
}
