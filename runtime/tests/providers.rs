//! Both wire formats against a local server replaying recorded transcripts: streamed text,
//! tool calls, usage, retries, idle streams and server errors.

mod model_server;

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
    assert_eq!(request.body["system"], "You are terse.");
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
