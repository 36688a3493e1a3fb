//! Everything a model server sends is untrusted: property tests that the SSE parser, both
//! wire formats and the `Retry-After` reader never panic on any input, and that how the
//! bytes happen to be split into network reads never changes what they decode to.

use std::time::{Duration, SystemTime};

use agent_runtime::provider::retry::{RETRY_AFTER_MS, requested_wait};
use agent_runtime::provider::sse::{SseEvent, SseParser};
use agent_runtime::provider::{Api, Delta, ModelResponse, ProviderError, decode_stream};
use proptest::prelude::*;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::{Value, json};

/// `bytes` cut at `cuts` (any positions, in any order, repeats allowed).
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

fn parse(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(
            parser
                .feed(chunk)
                .expect("small input stays under the event cap"),
        );
    }
    events.extend(parser.finish());
    events
}

/// The decoded answer and every streamed delta, or the error's text.
fn decode(api: Api, chunks: &[&[u8]]) -> Result<(ModelResponse, String), String> {
    let mut streamed = String::new();
    // Empty deltas show nothing to a reader, so they are not recorded.
    let result = decode_stream(api, chunks.iter().copied(), &mut |delta| match delta {
        Delta::Text(t) => streamed.push_str(t),
        Delta::Reasoning(r) if !r.is_empty() => {
            streamed.push('~');
            streamed.push_str(r);
        }
        Delta::Reasoning(_) => {}
    });
    result
        .map(|response| (response, streamed))
        .map_err(|e: ProviderError| e.to_string())
}

/// Text without line breaks: what one SSE field value can hold.
fn line_text() -> impl Strategy<Value = String> {
    "[^\r\n]{0,40}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_parse_the_same_however_they_are_split(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(any::<usize>(), 0..32),
    ) {
        prop_assert_eq!(parse(&split(&bytes, &cuts)), parse(&[&bytes]));
    }

    #[test]
    fn a_valid_sse_stream_decodes_to_its_events_at_any_split(
        events in proptest::collection::vec(
            (
                proptest::option::of("[a-z_]{1,20}"),
                proptest::collection::vec(line_text(), 1..4),
                proptest::option::of(line_text()),
                0..3usize,
            ),
            0..12,
        ),
        cuts in proptest::collection::vec(any::<usize>(), 0..32),
    ) {
        const ENDINGS: [&str; 3] = ["\n", "\r", "\r\n"];
        let mut wire = String::new();
        let mut expected = Vec::new();
        for (name, data, comment, ending) in &events {
            // One line ending per event: a `\r` ending followed by a blank line written
            // as `\n` would be one `\r\n`, which is the spec, not a parser bug.
            let end = ENDINGS[*ending];
            if let Some(comment) = comment {
                wire.push_str(&format!(":{comment}{end}"));
            }
            if let Some(name) = name {
                wire.push_str(&format!("event: {name}{end}"));
            }
            for line in data {
                wire.push_str(&format!("data: {line}{end}"));
            }
            wire.push_str(end);
            expected.push(SseEvent { event: name.clone(), data: data.join("\n") });
        }
        prop_assert_eq!(parse(&split(wire.as_bytes(), &cuts)), expected);
    }

    #[test]
    fn any_bytes_decode_without_panicking_and_the_same_at_any_split(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(any::<usize>(), 0..32),
        anthropic in any::<bool>(),
    ) {
        let api = if anthropic { Api::Anthropic } else { Api::OpenAi };
        let whole = decode(api, &[&bytes]);
        let pieces = decode(api, &split(&bytes, &cuts));
        prop_assert_eq!(whole.map(|(r, s)| (r.text, s)), pieces.map(|(r, s)| (r.text, s)));
    }

    /// Well-formed JSON with hostile numbers and shapes: indices up to `u64::MAX`, token
    /// counts that overflow when added, blocks never announced, missing fields.
    #[test]
    fn hostile_events_in_both_formats_never_panic(
        events in proptest::collection::vec(hostile_event(), 0..16),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let mut openai = String::new();
        let mut anthropic = String::new();
        for (o, a) in &events {
            openai.push_str(&format!("data: {o}\n\n"));
            anthropic.push_str(&format!("event: x\ndata: {a}\n\n"));
        }
        for (api, wire) in [(Api::OpenAi, openai), (Api::Anthropic, anthropic)] {
            let whole = decode(api, &[wire.as_bytes()]);
            let pieces = decode(api, &split(wire.as_bytes(), &cuts));
            prop_assert_eq!(
                whole.map(|(r, s)| (r.text, r.usage, r.tool_calls.len(), s)),
                pieces.map(|(r, s)| (r.text, r.usage, r.tool_calls.len(), s))
            );
        }
    }

    #[test]
    fn an_openai_answer_decodes_the_same_at_any_split(
        answer in answer(),
        cuts in proptest::collection::vec(any::<usize>(), 0..48),
    ) {
        let wire = openai_wire(&answer);
        let (response, streamed) = decode(Api::OpenAi, &split(wire.as_bytes(), &cuts)).unwrap();
        check(&answer, &response, &streamed)?;
    }

    #[test]
    fn an_anthropic_answer_decodes_the_same_at_any_split(
        answer in answer(),
        cuts in proptest::collection::vec(any::<usize>(), 0..48),
    ) {
        let wire = anthropic_wire(&answer);
        let (response, streamed) =
            decode(Api::Anthropic, &split(wire.as_bytes(), &cuts)).unwrap();
        check(&answer, &response, &streamed)?;
    }

    #[test]
    fn any_retry_header_waits_at_most_the_cap(
        value in proptest::collection::vec(any::<u8>(), 0..80),
        ms in any::<bool>(),
        cap_ms in 0..120_000u64,
    ) {
        let cap = Duration::from_millis(cap_ms);
        let Ok(value) = HeaderValue::from_bytes(&value) else {
            return Ok(());
        };
        let mut headers = HeaderMap::new();
        headers.insert(if ms { HeaderName::from_static(RETRY_AFTER_MS) } else { RETRY_AFTER }, value);
        if let Some(wait) = requested_wait(&headers, SystemTime::now(), cap) {
            prop_assert!(wait <= cap, "{wait:?} > {cap:?}");
        }
    }

    #[test]
    fn delta_seconds_of_any_size_are_honoured_up_to_the_cap(
        secs in any::<u128>(),
        cap_secs in 0..600u64,
    ) {
        let cap = Duration::from_secs(cap_secs);
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(&secs.to_string()).unwrap());
        let expected = Duration::from_secs(u64::try_from(secs).unwrap_or(u64::MAX)).min(cap);
        prop_assert_eq!(requested_wait(&headers, SystemTime::now(), cap), Some(expected));
    }

    #[test]
    fn http_dates_wait_until_then_up_to_the_cap(
        // RFC 850 dates have two-digit years, read as 1970-2069; and `now + ahead` stays
        // after 1970, which is all an HTTP date can say (the test's own formatting of an
        // earlier instant would panic in httpdate; parsing one is covered above).
        now_secs in 1_000_000..3_000_000_000u64,
        ahead in -1_000_000i64..1_000_000,
        form in 0..3usize,
    ) {
        let cap = Duration::from_secs(300);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_secs);
        let then = now.checked_add_signed(ahead);
        let text = httpdate::fmt_http_date(then);
        // The same instant in the two obsolete forms HTTP/1.1 still accepts.
        let text = match form {
            0 => text,
            1 => obsolete_rfc850(&text),
            _ => obsolete_asctime(&text),
        };
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(&text).unwrap());
        let expected = Duration::from_secs(ahead.max(0) as u64).min(cap);
        prop_assert_eq!(requested_wait(&headers, now, cap), Some(expected), "{}", text);
    }
}

/// `SystemTime + signed seconds`.
trait AddSigned {
    fn checked_add_signed(self, secs: i64) -> SystemTime;
}

impl AddSigned for SystemTime {
    fn checked_add_signed(self, secs: i64) -> SystemTime {
        let delta = Duration::from_secs(secs.unsigned_abs());
        if secs >= 0 {
            self + delta
        } else {
            self.checked_sub(delta).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }
}

/// "Sun, 06 Nov 1994 08:49:37 GMT" → "Sunday, 06-Nov-94 08:49:37 GMT".
fn obsolete_rfc850(imf: &str) -> String {
    let day = match &imf[..3] {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    };
    let (dd, mon, year, time) = (&imf[5..7], &imf[8..11], &imf[12..16], &imf[17..25]);
    format!("{day}, {dd}-{mon}-{} {time} GMT", &year[2..])
}

/// "Sun, 06 Nov 1994 08:49:37 GMT" → "Sun Nov  6 08:49:37 1994".
fn obsolete_asctime(imf: &str) -> String {
    let (day, dd, mon, year, time) = (
        &imf[..3],
        &imf[5..7],
        &imf[8..11],
        &imf[12..16],
        &imf[17..25],
    );
    format!(
        "{day} {mon} {:>2} {time} {year}",
        dd.trim_start_matches('0')
    )
}

/// One chunk of each format, built from hostile numbers.
fn hostile_event() -> impl Strategy<Value = (Value, Value)> {
    let number = prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), Just(0u64), any::<u64>()];
    (
        proptest::option::of(number.clone()),
        number.clone(),
        number.clone(),
        line_text(),
        0..6usize,
    )
        .prop_map(|(index, a, b, text, kind)| {
            let openai = match kind {
                0 => json!({"choices": [{"delta": {"tool_calls": [{"index": index, "id": text, "function": {"name": "read", "arguments": "{"}}]}}]}),
                1 => json!({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": text}}]}}]}),
                2 => json!({"choices": [], "usage": {"prompt_tokens": a, "completion_tokens": b}}),
                3 => json!({"choices": [{"delta": {"content": text, "reasoning": text}, "finish_reason": text}]}),
                4 => json!({"choices": [{"delta": null}], "error": null}),
                _ => json!({"choices": [{"delta": {"tool_calls": [{"id": text}]}}]}),
            };
            let index = index.unwrap_or(a);
            let anthropic = match kind {
                0 => json!({"type": "message_start", "message": {"usage": {"input_tokens": a, "cache_read_input_tokens": b, "cache_creation_input_tokens": a}}}),
                1 => json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": text, "name": text, "input": text}}),
                2 => json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": text}}),
                3 => json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
                4 => json!({"type": "message_delta", "delta": {"stop_reason": text}, "usage": {"output_tokens": b, "input_tokens": a}}),
                _ => json!({"type": text, "index": index}),
            };
            (openai, anthropic)
        })
}

/// What a model answered, before it is put on the wire.
#[derive(Debug, Clone)]
struct Answer {
    reasoning: Vec<String>,
    text: Vec<String>,
    /// `(id, name, argument pieces)`.
    calls: Vec<(String, String, Vec<String>)>,
    input_tokens: u64,
    output_tokens: u64,
}

fn answer() -> impl Strategy<Value = Answer> {
    // Any text, including line breaks, quotes and characters of every UTF-8 length, so
    // splits land inside characters and inside JSON escapes.
    let piece = "\\PC{0,12}|[\r\n\"\\\\é€😀]{1,4}";
    (
        proptest::collection::vec(piece, 0..4),
        proptest::collection::vec(piece, 0..8),
        proptest::collection::vec(
            (
                "[a-z0-9_]{1,12}",
                "[a-z_]{1,12}",
                proptest::collection::vec(piece, 0..4),
            ),
            0..3,
        ),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(reasoning, text, calls, input, output)| Answer {
            reasoning,
            text,
            calls,
            input_tokens: input.into(),
            output_tokens: output.into(),
        })
}

fn check(answer: &Answer, response: &ModelResponse, streamed: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(&response.text, &answer.text.concat());
    prop_assert_eq!(&response.reasoning, &answer.reasoning.concat());
    let mut expected_stream = String::new();
    for r in answer.reasoning.iter().filter(|r| !r.is_empty()) {
        expected_stream.push('~');
        expected_stream.push_str(r);
    }
    for t in answer.text.iter().filter(|t| !t.is_empty()) {
        expected_stream.push_str(t);
    }
    prop_assert_eq!(streamed, expected_stream);
    let calls: Vec<(String, String, String)> = response
        .tool_calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone()))
        .collect();
    let expected: Vec<(String, String, String)> = answer
        .calls
        .iter()
        .map(|(id, name, args)| {
            let args = args.concat();
            // Anthropic's fold sends `{}` for a tool call without arguments.
            (id.clone(), name.clone(), args)
        })
        .collect();
    prop_assert_eq!(calls.len(), expected.len());
    for (got, want) in calls.iter().zip(&expected) {
        prop_assert_eq!(&got.0, &want.0);
        prop_assert_eq!(&got.1, &want.1);
        if want.2.trim().is_empty() {
            prop_assert!(got.2 == want.2 || got.2 == "{}", "{:?}", got.2);
        } else {
            prop_assert_eq!(&got.2, &want.2);
        }
    }
    prop_assert_eq!(response.usage.input_tokens, answer.input_tokens);
    prop_assert_eq!(response.usage.output_tokens, answer.output_tokens);
    Ok(())
}

fn openai_wire(answer: &Answer) -> String {
    let mut chunks = Vec::new();
    for r in &answer.reasoning {
        chunks.push(json!({"choices": [{"index": 0, "delta": {"reasoning_content": r}}]}));
    }
    for t in &answer.text {
        chunks.push(json!({"choices": [{"index": 0, "delta": {"content": t}}]}));
    }
    for (i, (id, name, args)) in answer.calls.iter().enumerate() {
        chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
        ]}}]}));
        for piece in args {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "function": {"arguments": piece}}
            ]}}]}));
        }
    }
    chunks.push(json!({
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": answer.input_tokens, "completion_tokens": answer.output_tokens},
    }));
    let mut wire: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    wire.push_str("data: [DONE]\n\n");
    wire
}

fn anthropic_wire(answer: &Answer) -> String {
    let mut events: Vec<(&str, Value)> = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": answer.input_tokens, "output_tokens": 1}}}),
    )];
    let mut index = 0;
    if !answer.reasoning.is_empty() {
        events.push(("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}})));
        for r in &answer.reasoning {
            events.push(("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": r}})));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if !answer.text.is_empty() {
        events.push(("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        for t in &answer.text {
            events.push(("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}})));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (id, name, args) in &answer.calls {
        events.push(("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        for piece in args {
            events.push(("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    events.push(("ping", json!({"type": "ping"})));
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": answer.output_tokens}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}
