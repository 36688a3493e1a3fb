//! Paths of packd's routes, relative to the server's base URL. Names and hashes passed in
//! must already be valid (they come from signed documents or checked bodies).

/// `PUT` (upload), `GET`, `HEAD`: one sealed pack by the SHA-256 of its bytes.
pub fn blob(sha256: &str) -> String {
    format!("/v1/blobs/{sha256}")
}

/// `GET`: every pack with its versions.
pub const PACKS: &str = "/v1/packs";

/// `GET`: every version of one pack.
pub fn pack(name: &str) -> String {
    format!("/v1/packs/{name}")
}

/// `GET`: the live document of every channel.
pub const CHANNELS: &str = "/v1/channels";

/// `GET`: the live document's bytes; `PUT`: publish.
pub fn channel(channel: &str) -> String {
    format!("/v1/channels/{channel}")
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
pub fn channel_watch(channel: &str, wait_secs: u64, after: u64) -> String {
    format!("/v1/channels/{channel}?{WAIT_PARAM}={wait_secs}&{AFTER_PARAM}={after}")
}

/// `GET`: the live document's signature.
pub fn channel_signature(channel: &str) -> String {
    format!("/v1/channels/{channel}/signature")
}

/// `GET`: every document published on a channel.
pub fn history(channel: &str) -> String {
    format!("/v1/channels/{channel}/history")
}

/// `GET`: the document published at `sequence`.
pub fn history_document(channel: &str, sequence: u64) -> String {
    format!("/v1/channels/{channel}/history/{sequence}")
}

/// `GET`: the signature of the document published at `sequence`.
pub fn history_signature(channel: &str, sequence: u64) -> String {
    format!("/v1/channels/{channel}/history/{sequence}/signature")
}

/// `GET`: distinct installs by client release × pack and failure reports of a channel.
pub fn fleet(channel: &str) -> String {
    format!("/v1/channels/{channel}/fleet")
}

/// `POST`: a client's failure report.
pub fn reports(channel: &str) -> String {
    format!("/v1/channels/{channel}/reports")
}

/// `POST`: one install's outcome counts of one day; `GET`: the channel's outcome counts
/// merged per pack version × client release, with rates and intervals (`?days=N`).
pub fn outcomes(channel: &str) -> String {
    format!("/v1/channels/{channel}/outcomes")
}

/// What the guard saw on the channel's watched rollouts, and what it did.
pub fn guard(channel: &str) -> String {
    format!("/v1/channels/{channel}/guard")
}

/// The query parameter of `GET` [`outcomes`] and [`fleet`]: the UTC days to cover.
pub const DAYS_PARAM: &str = "days";

/// `GET`: the OpenAPI description, generated from this crate's types.
pub const OPENAPI: &str = "/v1/openapi.json";
