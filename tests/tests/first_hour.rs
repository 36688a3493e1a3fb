//! The app developer's first hour, through the binaries: the mistakes a new user of
//! `pack-client` makes in a config (an `https://` packd that speaks plain HTTP, a server URL
//! ending in `/v1`, a server that is not packd, a mistyped channel, a key the client does not
//! trust) each fail with what went wrong, where, and the fix, in one line.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;

use promptpack_tests::*;

/// A packd with channel `stable` (pack `builtin`, one version for every release) published
/// by `publisher`.
fn packd_with_stable(publisher: &Publisher, data: &Path) -> Packd {
    let packd = Packd::start(data, &publisher.server_config());
    let pack = publisher.build("1.0.0", "FIRST-HOUR");
    packd.upload(publisher, &pack);
    packd.publish(
        publisher,
        &publisher.sign(&[format!("*={}", pack.display())], "30d"),
    );
    packd
}

/// `pack-client refresh` in a fresh cache with `config`: exit status 3 and stderr.
fn refresh_fails(config: &Path) -> String {
    let cache = tempfile::tempdir().unwrap();
    let out: Output = client_cmd(cache.path(), config, "1.0.0")
        .arg("refresh")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    stderr
}

/// A config file of `publisher`'s with `server` replaced.
fn config_with_server(publisher: &Publisher, server: &str) -> PathBuf {
    publisher.client_config(server, "")
}

#[test]
fn https_to_a_packd_on_plain_http_says_it_does_not_speak_tls_and_suggests_http() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let rest = packd.url.strip_prefix("http://").unwrap();
    let config = config_with_server(&publisher, &format!("https://{rest}"));
    assert_eq!(
        refresh_fails(&config),
        format!(
            "refresh failed: request to https://{rest}/v1/channels/stable failed: received \
             corrupt message of type InvalidContentType: the server does not speak TLS (HTTPS) \
             there; if it is packd on plain HTTP, set `server = \"http://{rest}\"` in {}\n\
             still serving builtin 0.0.0 (builtin)\n",
            config.display()
        )
    );
}

#[test]
fn a_server_url_ending_in_v1_says_to_leave_it_off() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = packd_with_stable(&publisher, data.path());
    let config = config_with_server(&publisher, &format!("{}/v1", packd.url));
    assert_eq!(
        refresh_fails(&config),
        format!(
            "refresh failed: {url}/v1/v1/channels/stable answered 404: route GET \
             /v1/v1/channels/stable not found; the client adds /v1 to the server URL itself: \
             leave it off, `server = \"{url}\"` in {config}\n\
             still serving builtin 0.0.0 (builtin)\n",
            url = packd.url,
            config = config.display()
        )
    );
}

#[test]
fn a_mistyped_channel_lists_the_channels_the_server_has() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = packd_with_stable(&publisher, data.path());
    let config = publisher.client_config(&packd.url, "");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("channel = \"stable\"", "channel = \"stabel\"");
    std::fs::write(&config, text).unwrap();
    assert_eq!(
        refresh_fails(&config),
        format!(
            "refresh failed: {url}/v1/channels/stabel answered 404: channel stabel not found; \
             channels there: stable (pack builtin); check `channel = \"stabel\"` in {config}\n\
             still serving builtin 0.0.0 (builtin)\n",
            url = packd.url,
            config = config.display()
        )
    );
}

#[test]
fn a_key_the_client_does_not_trust_names_the_config_and_its_trusted_keys() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = packd_with_stable(&publisher, data.path());
    // The client trusts another publisher's key.
    let other = Publisher::new();
    let config = other.client_config(&packd.url, "");
    let key_id = |p: &Publisher| {
        let text = std::fs::read_to_string(p.keys().join("signing.pub")).unwrap();
        let key = minisign::PublicKeyBox::from_string(&text)
            .unwrap()
            .into_public_key()
            .unwrap();
        pack_format::keys::key_id_hex(key.keynum())
    };
    let said = refresh_fails(&config);
    let signed_by = key_id(&publisher);
    let trusted = key_id(&other);
    assert_eq!(
        said,
        format!(
            "refresh failed: channel document rejected: it is signed by key {signed_by}, which \
             this client does not trust (trusted: [{trusted}]); add the publisher's public key \
             (the signing.pub beside its signing.key) to `trusted_keys` in {}\n\
             still serving builtin 0.0.0 (builtin)\n",
            config.display()
        )
    );
}

#[test]
fn a_server_that_is_not_packd_is_said_to_be_so_with_one_line_of_its_page() {
    // A web server that answers every request with nginx's 404 page.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let page = "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n\
                        <center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx/1.24.0\
                        </center>\r\n</body>\r\n</html>\r\n";
            let _ = write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    let publisher = Publisher::new();
    let config = publisher.client_config(&url, "");
    assert_eq!(
        refresh_fails(&config),
        format!(
            "refresh failed: {url}/v1/channels/stable answered 404: a web page, not packd's \
             JSON error, so this does not look like packd (\"404 Not Found\"); is `server` in \
             {} the address of packd?\nstill serving builtin 0.0.0 (builtin)\n",
            config.display()
        )
    );
}

#[test]
fn a_failure_the_client_repaired_itself_is_shown_as_past_not_current() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = packd_with_stable(&publisher, data.path());
    let config = publisher.client_config(&packd.url, "");
    let cache = tempfile::tempdir().unwrap();
    let client = |args: &[&str]| {
        let mut cmd = client_cmd(cache.path(), &config, "1.0.0");
        cmd.args(args);
        run(cmd)
    };
    assert!(client(&["refresh"]).starts_with("Installed builtin 1.0.0"));

    // The cached pack is damaged on disk: the next start serves the built-in pack and says
    // why, as the current error.
    let packs = cache.path().join("packs");
    let pack = std::fs::read_dir(&packs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&pack).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&pack, bytes).unwrap();
    let status: serde_json::Value = serde_json::from_str(&client(&["--json", "status"])).unwrap();
    assert_eq!(status["serving"]["source"], "builtin", "{status}");
    assert_eq!(status["last_failure"]["resolved"], false, "{status}");
    assert!(
        status["last_error"]
            .as_str()
            .unwrap()
            .starts_with("start-up: "),
        "{status}"
    );

    // The next refresh downloads it again; from then on the failure is history.
    let refreshed = client(&["refresh"]);
    assert!(
        refreshed.contains("Serving builtin 1.0.0 (remote"),
        "{refreshed}"
    );
    let status: serde_json::Value = serde_json::from_str(&client(&["--json", "status"])).unwrap();
    assert_eq!(status["serving"]["source"], "remote", "{status}");
    assert_eq!(status["last_error"], serde_json::Value::Null, "{status}");
    assert_eq!(status["last_failure"]["resolved"], true, "{status}");
    let text = client(&["status"]);
    let failed = text
        .lines()
        .find(|l| l.starts_with("failed    "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        failed.ends_with(&format!(
            "; resolved: the refresh at {} succeeded",
            status["last_success"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(!text.contains("last error"), "{text}");
}
