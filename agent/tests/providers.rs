//! Both wire formats against a local server replaying recorded transcripts: streamed text,
//! tool calls, usage, retries, idle streams and server errors.

use crate::model_server;

use std::time::Duration;

use agent_runtime::provider::{
    Api, Delta, Message, ModelRequest, Provider, ProviderError, ProviderSettings, ToolSpec,
};
use model_server::{ModelServer, Reply};
use serde_json::json;

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read".into(),
        description: "Reads a file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
}

async fn call(
    api: Api,
    server: &ModelServer,
    tweak: impl FnOnce(&mut ProviderSettings),
) -> (
    Result<agent_runtime::provider::ModelResponse, ProviderError>,
    String,
) {
    let base = match api {
        Api::OpenAi => server.openai_base(),
        Api::Anthropic => server.addr.clone(),
    };
    let mut settings = ProviderSettings::for_tests(api, &base);
    settings.api_key = Some("sk-test".into());
    tweak(&mut settings);
    let provider = Provider::new(settings).unwrap();
    let messages = vec![Message::User {
        content: "show me greeting.txt".into(),
    }];
    let tools = tools();
    let mut streamed = String::new();
    let result = provider
        .complete(
            &ModelRequest {
                system: "You are terse.",
                messages: &messages,
                tools: &tools,
            },
            &mut |delta| {
                if let Delta::Text(t) = delta {
                    streamed.push_str(t)
                }
            },
        )
        .await;
    (result, streamed)
}

#[tokio::test]
async fn openai_stream_text_tool_calls_and_usage() {
    let server = ModelServer::start(vec![Reply::fixture(
        "openai_1_read_and_glob.sse",
        &[("DIR", "/w")],
    )]);
    let (response, streamed) = call(Api::OpenAi, &server, |_| {}).await;
    let response = response.unwrap();
    assert_eq!(response.text, "I'll look at the greeting file first.");
    assert_eq!(streamed, response.text, "text is streamed as it arrives");
    let calls: Vec<_> = response
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_k3LwR1", "read", r#"{"path":"/w/greeting.txt"}"#),
            ("call_k3LwR2", "glob", r#"{"pattern":"*.txt","path":"/w"}"#),
        ]
    );
    assert_eq!(
        (response.usage.input_tokens, response.usage.output_tokens),
        (1890, 61)
    );
    assert_eq!(response.stop_reason.as_deref(), Some("tool_calls"));

    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(request.body["stream"], true);
    assert_eq!(request.body["messages"][0]["role"], "system");
    assert_eq!(request.body["tools"][0]["function"]["name"], "read");
}

#[tokio::test]
async fn anthropic_stream_content_blocks_and_usage() {
    let server = ModelServer::start(vec![Reply::fixture(
        "anthropic_1_read_and_glob.sse",
        &[("DIR", "/w")],
    )]);
    let (response, streamed) = call(Api::Anthropic, &server, |_| {}).await;
    let response = response.unwrap();
    assert_eq!(response.text, "I'll look at the greeting file first.");
    assert_eq!(streamed, response.text);
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[0].id, "toolu_01A09q90qw90lq917835lq9");
    assert_eq!(
        response.tool_calls[0].arguments,
        r#"{"path":"/w/greeting.txt"}"#
    );
    assert_eq!(response.tool_calls[1].name, "glob");
    assert_eq!(
        (response.usage.input_tokens, response.usage.output_tokens),
        (1890, 61)
    );
    assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));

    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.authorization.as_deref(), Some("sk-test"));
    assert_eq!(request.body["system"][0]["text"], "You are terse.");
    assert_eq!(request.body["tools"][0]["input_schema"]["type"], "object");
    assert!(request.body["max_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn llama_cpp_quirks_reasoning_empty_id_late_name() {
    let server = ModelServer::start(vec![Reply::fixture("openai_quirks.sse", &[("DIR", "/w")])]);
    let (response, _) = call(Api::OpenAi, &server, |_| {}).await;
    let response = response.unwrap();
    assert_eq!(response.reasoning, "The user wants the file.");
    assert_eq!(response.tool_calls.len(), 1);
    let call = &response.tool_calls[0];
    assert_eq!(call.name, "read");
    assert!(!call.id.is_empty(), "an empty id is replaced");
    assert_eq!(call.arguments, r#"{"path":"/w/greeting.txt"}"#);
    assert_eq!(response.usage.input_tokens, 1500);
}

#[tokio::test]
async fn retries_429_and_5xx_honouring_retry_after() {
    let server = ModelServer::start(vec![
        Reply::Status {
            status: 429,
            retry_after: Some("0".into()),
            body: r#"{"error":{"message":"rate limited"}}"#.into(),
        },
        Reply::Status {
            status: 503,
            retry_after: None,
            body: "busy".into(),
        },
        Reply::fixture("openai_4_done.sse", &[]),
    ]);
    let (response, _) = call(Api::OpenAi, &server, |_| {}).await;
    assert_eq!(
        response.unwrap().text,
        "The greeting now says \"Hello, promptpack\"."
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retry_after_is_waited_for() {
    let server = ModelServer::start(vec![
        Reply::Status {
            status: 429,
            retry_after: Some("1".into()),
            body: String::new(),
        },
        Reply::fixture("openai_4_done.sse", &[]),
    ]);
    let started = std::time::Instant::now();
    let (response, _) = call(Api::OpenAi, &server, |_| {}).await;
    response.unwrap();
    // The test settings back off 10 ms; only the header explains a one-second wait.
    assert!(started.elapsed() >= Duration::from_millis(950));
}

#[tokio::test]
async fn gives_up_after_the_retry_budget() {
    let server = ModelServer::start(
        (0..10)
            .map(|_| Reply::Status {
                status: 500,
                retry_after: None,
                body: "boom".into(),
            })
            .collect(),
    );
    let (response, _) = call(Api::OpenAi, &server, |s| s.max_retries = 2).await;
    let err = response.unwrap_err();
    assert!(
        matches!(err, ProviderError::RetriesExhausted { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(server.requests().len(), 3);
}

/// The backoff pauses are held under `max_retry_wait` even when the first pause alone
/// would be longer: each is drawn from the upper half of the cap.
#[tokio::test]
async fn backoff_pauses_stay_under_the_longest_wait() {
    let busy = || Reply::Status {
        status: 503,
        retry_after: None,
        body: "busy".into(),
    };
    let server = ModelServer::start(vec![
        busy(),
        busy(),
        busy(),
        Reply::fixture("openai_4_done.sse", &[]),
    ]);
    let started = std::time::Instant::now();
    let (response, _) = call(Api::OpenAi, &server, |s| {
        s.retry_base = Duration::from_secs(10);
        s.max_retry_wait = Duration::from_millis(300);
    })
    .await;
    let elapsed = started.elapsed();
    response.unwrap();
    assert_eq!(server.requests().len(), 4);
    // Three pauses in [150 ms, 300 ms); uncapped they would be 10 s, 20 s and 40 s.
    assert!(elapsed >= Duration::from_millis(450), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = ModelServer::start(vec![Reply::Status {
        status: 400,
        retry_after: None,
        body: r#"{"error":{"message":"model not found"}}"#.into(),
    }]);
    let (response, _) = call(Api::Anthropic, &server, |_| {}).await;
    let err = response.unwrap_err();
    assert!(matches!(err, ProviderError::Status { status: 400, .. }));
    assert!(err.to_string().contains("model not found"));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_idle_stream_times_out() {
    let partial = model_server::fixture("openai_4_done.sse", &[]);
    let partial = partial.split("\n\n").next().unwrap().to_string() + "\n\n";
    let server = ModelServer::start(vec![Reply::Stall(partial)]);
    let (response, _) = call(Api::OpenAi, &server, |s| {
        s.idle_timeout = Duration::from_millis(300)
    })
    .await;
    assert!(matches!(
        response.unwrap_err(),
        ProviderError::IdleTimeout(_)
    ));
}

#[tokio::test]
async fn an_error_event_mid_stream_stops_the_call() {
    let server = ModelServer::start(vec![Reply::fixture(
        "anthropic_overloaded_midstream.sse",
        &[],
    )]);
    let (response, streamed) = call(Api::Anthropic, &server, |_| {}).await;
    let err = response.unwrap_err();
    assert!(err.to_string().contains("Overloaded"), "{err}");
    assert_eq!(streamed, "Working");
}

/// Wire values for `Retry-After` that a hostile or broken server might send: values of a
/// form we accept are waited for up to the cap; anything else is ignored and the (10 ms)
/// backoff applies. Either way the call goes on and succeeds.
#[tokio::test]
async fn absurd_retry_after_values_are_ignored_or_capped() {
    const CAP: Duration = Duration::from_millis(800);
    // (value, whether the wait is the cap)
    let cases = [
        ("1e20", false),
        ("-5", false),
        ("NaN", false),
        ("inf", false),
        ("0x10", false),
        ("soon", false),
        ("Wed, 21 Oct 2015 07:28:00 GMT", false),
        ("99999999999999999999999999", true),
        ("18446744073709551616", true),
        ("Fri, 31 Dec 9999 23:59:59 GMT", true),
    ];
    for (value, capped) in cases {
        let server = ModelServer::start(vec![
            Reply::Status {
                status: 429,
                retry_after: Some(value.into()),
                body: String::new(),
            },
            Reply::fixture("openai_4_done.sse", &[]),
        ]);
        let started = std::time::Instant::now();
        let (response, _) = call(Api::OpenAi, &server, |s| s.max_retry_wait = CAP).await;
        let elapsed = started.elapsed();
        let response = response.unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(
            response.text, "The greeting now says \"Hello, promptpack\".",
            "{value}"
        );
        assert_eq!(server.requests().len(), 2, "{value}");
        if capped {
            assert!(elapsed >= CAP, "{value}: waited only {elapsed:?}");
            assert!(elapsed < CAP * 5, "{value}: waited {elapsed:?}");
        } else {
            assert!(elapsed < CAP, "{value}: waited {elapsed:?}");
        }
    }
}

/// `retry-after-ms` is more precise than `Retry-After` and wins when both are sent.
#[tokio::test]
async fn retry_after_ms_wins_over_retry_after() {
    let server = ModelServer::start(vec![
        Reply::Raw {
            status: 429,
            headers: vec![
                ("retry-after-ms".into(), "600".into()),
                ("retry-after".into(), "0".into()),
            ],
            body: Vec::new(),
        },
        Reply::fixture("openai_4_done.sse", &[]),
    ]);
    let started = std::time::Instant::now();
    let (response, _) = call(Api::OpenAi, &server, |_| {}).await;
    response.unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

/// An error answer's body only explains the status: a huge one is not read whole and a
/// stalled one does not hold the call, and the part that arrived is still shown.
#[tokio::test]
async fn huge_and_stalled_error_bodies_do_not_hold_the_call() {
    // One ASCII byte first, so the 2000-byte cut falls inside an `é`.
    let mut huge = b"a".to_vec();
    huge.extend_from_slice("é".repeat(4 * 1024 * 1024).as_bytes());
    // Not UTF-8 at the end either: only the start is ever looked at.
    huge.extend_from_slice(&[0xff, 0xfe]);
    let server = ModelServer::start(vec![
        Reply::Raw {
            status: 400,
            headers: Vec::new(),
            body: huge,
        },
        Reply::StatusStall {
            status: 404,
            body_start: "no such model: test-model".into(),
        },
    ]);
    let (response, _) = call(Api::OpenAi, &server, |_| {}).await;
    let err = response.unwrap_err();
    let ProviderError::Status {
        status: 400, body, ..
    } = &err
    else {
        panic!("{err}");
    };
    // The half character at the cut is dropped, not shown as a replacement character.
    assert_eq!(body.len(), 1999);
    assert!(
        body.starts_with("aéé") && !body.contains('\u{fffd}'),
        "{body}"
    );

    let started = std::time::Instant::now();
    let (response, _) = call(Api::OpenAi, &server, |s| {
        s.idle_timeout = Duration::from_millis(300)
    })
    .await;
    let err = response.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Status { status: 404, body, .. } if body == "no such model: test-model"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A server that streams without end is cut off at the response cap with a clear error,
/// instead of holding the call and growing memory until it runs out.
#[tokio::test]
async fn an_endless_stream_stops_at_the_response_cap() {
    // Comment lines: valid SSE that never finishes an event, the cheapest flood to decode.
    let line = format!(": {}\n", "x".repeat(60_000));
    const LIMIT: usize = 4 * 1024 * 1024;
    let server = ModelServer::start(vec![Reply::Sse(line.repeat(LIMIT / line.len() + 2))]);
    let (response, _) = call(Api::OpenAi, &server, |s| s.max_response_bytes = LIMIT).await;
    let err = response.unwrap_err();
    assert!(
        matches!(err, ProviderError::TooLarge { limit: LIMIT }),
        "{err}"
    );
    assert!(err.to_string().contains("bytes without finishing"), "{err}");
}
