//! Paths of packd's routes, relative to the server's base URL: each route's template (as
//! packd's router and its OpenAPI document write it, `{name}` for a parameter) and, next to
//! it, the function that fills it in. packd registers its routes under these templates and
//! a test of packd compares them with its OpenAPI document, so a route cannot move on one
//! side only. Names and hashes passed in must already be valid (they come from signed
//! documents or checked bodies).

/// `PUT` (upload), `GET`, `HEAD`: one sealed pack by the SHA-256 of its bytes.
pub const BLOB_ROUTE: &str = "/v1/blobs/{sha256}";

/// [`BLOB_ROUTE`] for `sha256`.
pub fn blob(sha256: &str) -> String {
    fill(BLOB_ROUTE, &[sha256])
}

/// `GET`: every pack with its versions.
pub const PACKS: &str = "/v1/packs";

/// `GET`: every version of one pack.
pub const PACK_ROUTE: &str = "/v1/packs/{name}";

/// [`PACK_ROUTE`] for pack `name`.
pub fn pack(name: &str) -> String {
    fill(PACK_ROUTE, &[name])
}

/// `GET`: the live document of every channel.
pub const CHANNELS: &str = "/v1/channels";

/// `GET`: the live document's bytes (a watch with [`WAIT_PARAM`]); `PUT`: publish.
pub const CHANNEL_ROUTE: &str = "/v1/channels/{channel}";

/// [`CHANNEL_ROUTE`] for `channel`.
pub fn channel(channel: &str) -> String {
    fill(CHANNEL_ROUTE, &[channel])
}

/// The query parameter that makes `GET /v1/channels/{channel}` a watch: `wait=N` (seconds).
pub const WAIT_PARAM: &str = "wait";

/// The query parameter of a watch that says which document the client holds: `after=S`, the
/// sequence of its accepted document.
pub const AFTER_PARAM: &str = "after";

/// `GET`: a watch, a long-poll on the live document, from the document of sequence
/// `after`. When the live sequence is another, the answer is the live document at once
/// (`200`). When it is `after`, the server holds the request until the channel's live
/// sequence changes (then `200` with the new document) or until the wait is over (`304`); the
/// wait is capped by the server and stretched by up to a sixteenth so that watchers started
/// together do not come back together (as Consul's blocking queries do). Both answers say the
/// seconds granted in [`crate::headers::WAIT`] and carry `Cache-Control: no-store`. A full
/// server answers `503` `watchers_full` with `Retry-After`. The answer is only a hint: a
/// client verifies what it then fetches as on any refresh.
///
/// What the client holds is in the URL, not only in a header: a caching proxy may drop
/// `If-None-Match` on its way to the server (nginx's `proxy_cache` does), and keys its cache
/// on the URL. A client also sends the accepted document's `If-None-Match`, which a server
/// that does not know `after` holds the watch by.
pub fn channel_watch(channel_name: &str, wait_secs: u64, after: u64) -> String {
    format!(
        "{}?{WAIT_PARAM}={wait_secs}&{AFTER_PARAM}={after}",
        channel(channel_name)
    )
}

/// `GET`: the live document's signature.
pub const CHANNEL_SIGNATURE_ROUTE: &str = "/v1/channels/{channel}/signature";

/// [`CHANNEL_SIGNATURE_ROUTE`] for `channel`.
pub fn channel_signature(channel: &str) -> String {
    fill(CHANNEL_SIGNATURE_ROUTE, &[channel])
}

/// `GET`: every document published on a channel.
pub const HISTORY_ROUTE: &str = "/v1/channels/{channel}/history";

/// [`HISTORY_ROUTE`] for `channel`.
pub fn history(channel: &str) -> String {
    fill(HISTORY_ROUTE, &[channel])
}

/// `GET`: the document published at `sequence`.
pub const HISTORY_DOCUMENT_ROUTE: &str = "/v1/channels/{channel}/history/{sequence}";

/// [`HISTORY_DOCUMENT_ROUTE`] for `channel` and `sequence`.
pub fn history_document(channel: &str, sequence: u64) -> String {
    fill(HISTORY_DOCUMENT_ROUTE, &[channel, &sequence.to_string()])
}

/// `GET`: the signature of the document published at `sequence`.
pub const HISTORY_SIGNATURE_ROUTE: &str = "/v1/channels/{channel}/history/{sequence}/signature";

/// [`HISTORY_SIGNATURE_ROUTE`] for `channel` and `sequence`.
pub fn history_signature(channel: &str, sequence: u64) -> String {
    fill(HISTORY_SIGNATURE_ROUTE, &[channel, &sequence.to_string()])
}

/// `GET`: distinct installs by client release × pack and failure reports of a channel.
pub const FLEET_ROUTE: &str = "/v1/channels/{channel}/fleet";

/// [`FLEET_ROUTE`] for `channel`.
pub fn fleet(channel: &str) -> String {
    fill(FLEET_ROUTE, &[channel])
}

/// `POST`: a client's failure report.
pub const REPORTS_ROUTE: &str = "/v1/channels/{channel}/reports";

/// [`REPORTS_ROUTE`] for `channel`.
pub fn reports(channel: &str) -> String {
    fill(REPORTS_ROUTE, &[channel])
}

/// `POST`: one install's outcome counts of one day; `GET`: the channel's outcome counts
/// merged per pack version × client release, with rates and intervals (`?days=N`).
pub const OUTCOMES_ROUTE: &str = "/v1/channels/{channel}/outcomes";

/// [`OUTCOMES_ROUTE`] for `channel`.
pub fn outcomes(channel: &str) -> String {
    fill(OUTCOMES_ROUTE, &[channel])
}

/// `GET`: what the guard saw on the channel's watched rollouts, and what it did.
pub const GUARD_ROUTE: &str = "/v1/channels/{channel}/guard";

/// [`GUARD_ROUTE`] for `channel`.
pub fn guard(channel: &str) -> String {
    fill(GUARD_ROUTE, &[channel])
}

/// The query parameter of `GET` [`outcomes`] and [`fleet`]: the UTC days to cover.
pub const DAYS_PARAM: &str = "days";

/// `GET`: the OpenAPI description, generated from this crate's types.
pub const OPENAPI: &str = "/v1/openapi.json";

/// `GET`: liveness (`ok`).
pub const HEALTHZ: &str = "/healthz";

/// `GET`: readiness (storage reachable and writable).
pub const READYZ: &str = "/readyz";

/// `GET`: Prometheus metrics.
pub const METRICS: &str = "/metrics";

/// Every route template packd serves, in the order above.
pub const ROUTES: [&str; 17] = [
    BLOB_ROUTE,
    PACKS,
    PACK_ROUTE,
    CHANNELS,
    CHANNEL_ROUTE,
    CHANNEL_SIGNATURE_ROUTE,
    HISTORY_ROUTE,
    HISTORY_DOCUMENT_ROUTE,
    HISTORY_SIGNATURE_ROUTE,
    FLEET_ROUTE,
    REPORTS_ROUTE,
    OUTCOMES_ROUTE,
    GUARD_ROUTE,
    OPENAPI,
    HEALTHZ,
    READYZ,
    METRICS,
];

/// `template` with its `{…}` parameters replaced by `values`, in order. A value is inserted
/// as it is: nothing in it is taken for a parameter.
fn fill(template: &str, values: &[&str]) -> String {
    let mut path =
        String::with_capacity(template.len() + values.iter().map(|v| v.len()).sum::<usize>());
    let mut values = values.iter();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map_or(rest.len(), |end| open + end + 1);
        path.push_str(&rest[..open]);
        path.push_str(values.next().copied().unwrap_or_default());
        rest = &rest[close..];
    }
    path.push_str(rest);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_builder_fills_its_template() {
        let sha = "a".repeat(64);
        assert_eq!(blob(&sha), format!("/v1/blobs/{sha}"));
        assert_eq!(pack("core"), "/v1/packs/core");
        assert_eq!(channel("stable"), "/v1/channels/stable");
        assert_eq!(
            channel_watch("stable", 30, 7),
            "/v1/channels/stable?wait=30&after=7"
        );
        assert_eq!(channel_signature("stable"), "/v1/channels/stable/signature");
        assert_eq!(history("stable"), "/v1/channels/stable/history");
        assert_eq!(
            history_document("stable", 12),
            "/v1/channels/stable/history/12"
        );
        assert_eq!(
            history_signature("stable", 12),
            "/v1/channels/stable/history/12/signature"
        );
        assert_eq!(fleet("stable"), "/v1/channels/stable/fleet");
        assert_eq!(reports("stable"), "/v1/channels/stable/reports");
        assert_eq!(outcomes("stable"), "/v1/channels/stable/outcomes");
        assert_eq!(guard("stable"), "/v1/channels/stable/guard");
    }

    #[test]
    fn a_value_is_not_read_as_a_parameter() {
        assert_eq!(
            fill(HISTORY_DOCUMENT_ROUTE, &["{sequence}", "3"]),
            "/v1/channels/{sequence}/history/3"
        );
    }

    #[test]
    fn routes_are_distinct() {
        let distinct: std::collections::BTreeSet<&str> = ROUTES.into_iter().collect();
        assert_eq!(distinct.len(), ROUTES.len());
    }
}
