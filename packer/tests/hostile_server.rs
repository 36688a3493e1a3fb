//! `packer` against a server that answers with things packd never sends: packer must
//! refuse with a message naming what is wrong, never panic, and never lose the server's
//! own explanation.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Output};

use common::{assert_fails, stderr};

/// A one-thread HTTP/1.1 server on loopback that answers every request with
/// `answer(path)` = (status line, body), then closes the connection.
fn serve(answer: fn(&str) -> (&'static str, Vec<u8>)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // Skip the headers; these requests have no body.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request_line.split(' ').nth(1).unwrap_or("/");
            let (status, body) = answer(path);
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    url
}

fn status(url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packer"))
        .args(["status", "--server", url])
        .env_remove("PROMPTPACK_TOKEN")
        .output()
        .unwrap()
}

#[track_caller]
fn assert_refused_without_panic(out: &Output) {
    assert_fails(out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert!(!stderr(out).contains("panicked"), "{}", stderr(out));
}

#[test]
fn a_pack_record_whose_sha256_is_not_hex_is_refused_by_name() {
    let url = serve(|path| {
        match path {
        "/v1/channels" => ("200 OK", br#"{"channels":[]}"#.to_vec()),
        // Twelve bytes in, the cut `status` shows would fall inside a character.
        _ => (
            "200 OK",
            r#"{"packs":[{"name":"p","versions":[{"name":"p","version":"1.0.0","schema":1,"sha256":"abcdefghijké€€€","size":1,"uploaded_at":"2026-01-01T00:00:00Z"}]}]}"#
                .as_bytes()
                .to_vec(),
        ),
    }
    });
    let out = status(&url);
    assert_refused_without_panic(&out);
    let err = stderr(&out);
    assert!(
        err.contains("expected a SHA-256 as 64 lowercase hex digits, found \"abcdefghijké€€€\""),
        "{err}"
    );
}

#[test]
fn an_error_body_that_is_not_utf8_is_still_shown() {
    let url = serve(|_| ("500 Internal Server Error", b"disk \xff full".to_vec()));
    let out = status(&url);
    assert_refused_without_panic(&out);
    let err = stderr(&out);
    assert!(
        err.contains("500 Internal Server Error: disk \u{fffd} full"),
        "{err}"
    );
}

#[test]
fn a_channel_name_that_would_leave_the_channels_path_is_refused() {
    let url = serve(|path| {
        match path {
        "/v1/channels" => (
            "200 OK",
            br#"{"channels":[{"channel":"../packs","sequence":1,"sha256":"x","key_id":"k","expires_at":"","published_at":""}]}"#
                .to_vec(),
        ),
        // Reached only if packer followed the name out of /v1/channels/.
        _ => ("200 OK", br#"{"packs":[]}"#.to_vec()),
    }
    });
    let out = status(&url);
    assert_refused_without_panic(&out);
    let err = stderr(&out);
    assert!(err.contains("invalid channel name \"../packs\""), "{err}");
}
