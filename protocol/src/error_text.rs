//! How an error reads for a person: the whole chain on one line ([`report`]), or only its
//! innermost cause ([`root_cause`]). Every binary (packd, packer, pack-client, agent) prints
//! its final error with [`report`], and the HTTP callers (the client's fetches and reports,
//! the agent's model calls) name a failed request by its [`root_cause`], so they all read
//! alike.

/// An error and its causes on one line for a person: `outer: cause: root`. Errors often
/// embed their source's message in their own (`reading x: No such file`) *and* return it
/// from `source()`; a cause whose text the line already holds is skipped, so every message
/// appears once. Every binary prints its final error with this, so they all read alike.
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    // Some messages (TOML's, with their caret drawing) end in a newline of their own.
    let mut line = error.to_string().trim_end().to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string().trim_end().to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = next.source();
    }
    line
}

/// The innermost cause's message. Transport errors wrap the one fact a person needs
/// ("Connection refused") in layers that repeat the URL ("error sending request for url
/// (…)", "client error (Connect)"); callers that already name the URL show only this.
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(next) = innermost.source() {
        innermost = next;
    }
    innermost.to_string()
}

#[cfg(test)]
mod tests {
    use super::{report, root_cause};

    #[derive(Debug, thiserror::Error)]
    #[error("binding 127.0.0.1:1: {source}")]
    struct Embeds {
        #[source]
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("starting packd")]
    struct Outer(#[source] Embeds);

    fn refused() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused")
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let error = Outer(Embeds { source: refused() });
        assert_eq!(
            report(&error),
            "starting packd: binding 127.0.0.1:1: Connection refused"
        );
    }

    #[test]
    fn root_cause_is_the_innermost_message() {
        let error = Outer(Embeds { source: refused() });
        assert_eq!(root_cause(&error), "Connection refused");
        assert_eq!(root_cause(&refused()), "Connection refused");
    }
}
